"""Embedded, deterministic synthetic English -> German translation corpus.

The project's default training run uses this task so that it needs no download.
A small grammar generates an abstract clause (verb frame, noun phrases, tense,
modality, negation, adverbs, prepositional phrases, embedding) and realises it
twice: once as English-like and once as German-like text.  Pure Python, standard
library only, driven by ``random.Random(seed)``.

Translation phenomena that the corpus exercises:

* grammatical gender (der/die/das) and plural noun forms (Mann -> Männer);
* case agreement of articles, ``dies-``, ``ein``/``kein`` and possessives:
  nominative subjects, accusative objects, dative objects of dative verbs
  (``helfen``, ``folgen``, ``danken`` ...), dative indirect objects
  ("gives the book to the woman" -> "gibt der Frau das Buch", with reordering),
  accusative and dative prepositions, dative plural ``-n`` and weak masculine
  nouns (den Jungen, dem Studenten);
* preposition + article contractions (im, ins, am, zum, zur, vom);
* adjective inflection by determiner type (weak/mixed/strong), gender, number
  and case; uninflected predicative adjectives;
* verb conjugation by person and number, including stem-vowel changes
  (lesen -> liest, fahren -> fährt), irregular verbs (sein, haben, wissen,
  mögen) and modal verbs (können, müssen, wollen, sollen, dürfen);
* verb-second word order, inversion after a fronted time adverb or a fronted
  subordinate clause, verb-final subordinate clauses (weil, dass, obwohl ...),
  separable verbs (ruft ... an / anruft), perfect tense with haben/sein and
  clause-final participles, modal + clause-final infinitive;
* negation (nicht placement, "not a" -> kein), yes/no and wh-questions,
  subject relative clauses with comma-delimited relative pronouns, and
  ``kennen``/``wissen`` chosen by the English construction.

The lexicon is one-to-one per sense and every rule is systematic, so the
German sentence is a function of the English sentence (checked while
generating).  Sentences have 4-25 words on both sides and are cased,
punctuated and space-normal.

Public API: :func:`generate_pairs`, :func:`write_corpus`, :func:`lexicon_sizes`;
:func:`realise` with :class:`Clause`/:class:`NP`/:class:`PP` and the look-ups
:func:`noun`, :func:`verb`, :func:`adjective` render hand-built clauses (tests).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from transformer.common.fileio import atomic_write

__all__ = [
    "GENERATOR_VERSION",
    "MAX_WORDS",
    "MIN_WORDS",
    "SPLITS",
    "Adj",
    "Clause",
    "NP",
    "Noun",
    "PP",
    "Verb",
    "adjective",
    "generate_pairs",
    "lexicon_sizes",
    "noun",
    "realise",
    "verb",
    "word_count",
    "write_corpus",
]

GENERATOR_VERSION = 1
MIN_WORDS = 4
MAX_WORDS = 25
SPLITS = ("train", "valid", "test")
_PUNCT = (",", ".", "?")

# ---------------------------------------------------------------------------
# Lexicon
# ---------------------------------------------------------------------------
# Noun tags (single characters):
#   p person, a animal, t portable thing, P place,
#   r readable, f food, w writable, g giftable, x washable, b buildable,
#   s surface ("on"), u "under", l landmark (behind / in front of / next to),
#   o openable, h hearable, d drawable/paintable, e tellable, c catchable,
#   v vehicle (wait for), B enterable ("in"/"into"), R "through", X "across",
#   A "at" (an), y tidyable.


@dataclass(frozen=True)
class Noun:
    en: str
    en_pl: str
    de: str
    gender: str  # "m" | "f" | "n"
    de_pl: str
    tags: str
    weak: str = ""  # n-declension singular accusative/dative form


def _nouns() -> tuple[Noun, ...]:
    rows = [
        # persons
        ("man", "men", "Mann", "m", "Männer", "p"),
        ("woman", "women", "Frau", "f", "Frauen", "p"),
        ("child", "children", "Kind", "n", "Kinder", "p"),
        ("boy", "boys", "Junge", "m", "Jungen", "p", "Jungen"),
        ("girl", "girls", "Mädchen", "n", "Mädchen", "p"),
        ("teacher", "teachers", "Lehrer", "m", "Lehrer", "p"),
        ("doctor", "doctors", "Arzt", "m", "Ärzte", "p"),
        ("student", "students", "Student", "m", "Studenten", "p", "Studenten"),
        ("friend", "friends", "Freund", "m", "Freunde", "p"),
        ("neighbor", "neighbors", "Nachbar", "m", "Nachbarn", "p", "Nachbarn"),
        ("father", "fathers", "Vater", "m", "Väter", "p"),
        ("mother", "mothers", "Mutter", "f", "Mütter", "p"),
        ("brother", "brothers", "Bruder", "m", "Brüder", "p"),
        ("sister", "sisters", "Schwester", "f", "Schwestern", "p"),
        ("grandmother", "grandmothers", "Großmutter", "f", "Großmütter", "p"),
        ("grandfather", "grandfathers", "Großvater", "m", "Großväter", "p"),
        ("cook", "cooks", "Koch", "m", "Köche", "p"),
        ("king", "kings", "König", "m", "Könige", "p"),
        ("queen", "queens", "Königin", "f", "Königinnen", "p"),
        ("farmer", "farmers", "Bauer", "m", "Bauern", "p", "Bauern"),
        ("baker", "bakers", "Bäcker", "m", "Bäcker", "p"),
        ("waiter", "waiters", "Kellner", "m", "Kellner", "p"),
        ("driver", "drivers", "Fahrer", "m", "Fahrer", "p"),
        ("singer", "singers", "Sänger", "m", "Sänger", "p"),
        ("policeman", "policemen", "Polizist", "m", "Polizisten", "p", "Polizisten"),
        # animals
        ("dog", "dogs", "Hund", "m", "Hunde", "adc"),
        ("cat", "cats", "Katze", "f", "Katzen", "adc"),
        ("horse", "horses", "Pferd", "n", "Pferde", "adx"),
        ("bird", "birds", "Vogel", "m", "Vögel", "adch"),
        ("mouse", "mice", "Maus", "f", "Mäuse", "ac"),
        ("cow", "cows", "Kuh", "f", "Kühe", "ad"),
        ("rabbit", "rabbits", "Hase", "m", "Hasen", "ac", "Hasen"),
        ("fox", "foxes", "Fuchs", "m", "Füchse", "ac"),
        ("bear", "bears", "Bär", "m", "Bären", "a", "Bären"),
        ("duck", "ducks", "Ente", "f", "Enten", "adc"),
        # things
        ("book", "books", "Buch", "n", "Bücher", "trg"),
        ("letter", "letters", "Brief", "m", "Briefe", "trwg"),
        ("newspaper", "newspapers", "Zeitung", "f", "Zeitungen", "tr"),
        ("story", "stories", "Geschichte", "f", "Geschichten", "rweh"),
        ("song", "songs", "Lied", "n", "Lieder", "wh"),
        ("map", "maps", "Karte", "f", "Karten", "trd"),
        ("apple", "apples", "Apfel", "m", "Äpfel", "tfg"),
        ("cake", "cakes", "Kuchen", "m", "Kuchen", "tfg"),
        ("bread", "breads", "Brot", "n", "Brote", "tf"),
        ("egg", "eggs", "Ei", "n", "Eier", "tf"),
        ("soup", "soups", "Suppe", "f", "Suppen", "tf"),
        ("car", "cars", "Auto", "n", "Autos", "txlovd"),
        ("key", "keys", "Schlüssel", "m", "Schlüssel", "tg"),
        ("chair", "chairs", "Stuhl", "m", "Stühle", "tsubd"),
        ("table", "tables", "Tisch", "m", "Tische", "tsubxd"),
        ("door", "doors", "Tür", "f", "Türen", "tolAd"),
        ("window", "windows", "Fenster", "n", "Fenster", "toxA"),
        ("bag", "bags", "Tasche", "f", "Taschen", "tog"),
        ("cup", "cups", "Tasse", "f", "Tassen", "txg"),
        ("bottle", "bottles", "Flasche", "f", "Flaschen", "to"),
        ("glass", "glasses", "Glas", "n", "Gläser", "tx"),
        ("ball", "balls", "Ball", "m", "Bälle", "tgc"),
        ("picture", "pictures", "Bild", "n", "Bilder", "tgd"),
        ("flower", "flowers", "Blume", "f", "Blumen", "tgd"),
        ("gift", "gifts", "Geschenk", "n", "Geschenke", "tog"),
        ("shoe", "shoes", "Schuh", "m", "Schuhe", "tx"),
        ("hat", "hats", "Hut", "m", "Hüte", "tg"),
        ("coat", "coats", "Mantel", "m", "Mäntel", "tx"),
        ("phone", "phones", "Telefon", "n", "Telefone", "t"),
        ("computer", "computers", "Computer", "m", "Computer", "t"),
        ("ticket", "tickets", "Fahrkarte", "f", "Fahrkarten", "tg"),
        ("pen", "pens", "Stift", "m", "Stifte", "tg"),
        ("box", "boxes", "Kiste", "f", "Kisten", "tosbd"),
        ("lamp", "lamps", "Lampe", "f", "Lampen", "t"),
        ("clock", "clocks", "Uhr", "f", "Uhren", "tg"),
        ("umbrella", "umbrellas", "Regenschirm", "m", "Regenschirme", "t"),
        ("bicycle", "bicycles", "Fahrrad", "n", "Fahrräder", "txl"),
        ("tree", "trees", "Baum", "m", "Bäume", "uld"),
        ("bus", "buses", "Bus", "m", "Busse", "vl"),
        ("train", "trains", "Zug", "m", "Züge", "v"),
        # places
        ("garden", "gardens", "Garten", "m", "Gärten", "PBRy"),
        ("house", "houses", "Haus", "n", "Häuser", "PBlbdy"),
        ("kitchen", "kitchens", "Küche", "f", "Küchen", "PBy"),
        ("station", "stations", "Bahnhof", "m", "Bahnhöfe", "PBl"),
        ("school", "schools", "Schule", "f", "Schulen", "PBl"),
        ("park", "parks", "Park", "m", "Parks", "PBR"),
        ("city", "cities", "Stadt", "f", "Städte", "PBR"),
        ("village", "villages", "Dorf", "n", "Dörfer", "PBR"),
        ("office", "offices", "Büro", "n", "Büros", "PBy"),
        ("shop", "shops", "Laden", "m", "Läden", "PBl"),
        ("market", "markets", "Markt", "m", "Märkte", "PR"),
        ("library", "libraries", "Bibliothek", "f", "Bibliotheken", "PBl"),
        ("restaurant", "restaurants", "Restaurant", "n", "Restaurants", "PBl"),
        ("hotel", "hotels", "Hotel", "n", "Hotels", "PBl"),
        ("museum", "museums", "Museum", "n", "Museen", "PBl"),
        ("church", "churches", "Kirche", "f", "Kirchen", "PBl"),
        ("forest", "forests", "Wald", "m", "Wälder", "PBR"),
        ("room", "rooms", "Zimmer", "n", "Zimmer", "PBy"),
        ("bank", "banks", "Bank", "f", "Banken", "PBl"),
        ("street", "streets", "Straße", "f", "Straßen", "PsRX"),
        ("bridge", "bridges", "Brücke", "f", "Brücken", "PsuX"),
        ("river", "rivers", "Fluss", "m", "Flüsse", "PXA"),
        ("lake", "lakes", "See", "m", "Seen", "PA"),
        ("hospital", "hospitals", "Krankenhaus", "n", "Krankenhäuser", "PBl"),
        ("airport", "airports", "Flughafen", "m", "Flughäfen", "PB"),
        ("beach", "beaches", "Strand", "m", "Strände", "PA"),
    ]
    return tuple(Noun(*r) for r in rows)


NOUNS = _nouns()


@dataclass(frozen=True)
class Adj:
    en: str
    de: str
    tags: str  # noun tags it may modify
    gradable: bool = True


def _adjs() -> tuple[Adj, ...]:
    pa, th, pl = "pa", "tvrwh", "P"
    rows = [
        ("big", "groß", pa + th + pl),
        ("small", "klein", pa + th + pl),
        ("old", "alt", pa + th + pl),
        ("young", "jung", pa),
        ("new", "neu", th + pl),
        ("beautiful", "schön", pa + th + pl),
        ("good", "gut", "p" + th),
        ("red", "rot", "t", False),
        ("blue", "blau", "t", False),
        ("green", "grün", "t", False),
        ("yellow", "gelb", "t", False),
        ("black", "schwarz", "ta", False),
        ("white", "weiß", "ta", False),
        ("tired", "müde", pa),
        ("happy", "glücklich", pa),
        ("sad", "traurig", "p"),
        ("hungry", "hungrig", pa),
        ("friendly", "freundlich", pa),
        ("clever", "klug", pa),
        ("nice", "nett", "p"),
        ("strong", "stark", pa),
        ("rich", "reich", "p"),
        ("poor", "arm", "p"),
        ("famous", "berühmt", "p" + pl),
        ("fast", "schnell", "av"),
        ("heavy", "schwer", "t"),
        ("cheap", "billig", "t"),
        ("long", "lang", "rwh"),
        ("short", "kurz", "rwh"),
        ("dirty", "schmutzig", "t" + pl),
        ("clean", "sauber", "t" + pl),
        ("empty", "leer", "t" + pl),
        ("quiet", "ruhig", "p" + pl),
        ("loud", "laut", "pah"),
        ("strange", "seltsam", pa + th + pl),
        ("warm", "warm", "f" + pl),
        ("cold", "kalt", "f" + pl),
        ("interesting", "interessant", "rwhp" + pl),
        ("funny", "lustig", "prh"),
        ("dangerous", "gefährlich", "a" + pl),
    ]
    return tuple(Adj(*r) for r in rows)


ADJS = _adjs()


@dataclass(frozen=True)
class Verb:
    en: str  # base form (may contain a particle: "look for")
    en3: str  # third person singular present
    en_pp: str  # past participle
    de: str  # infinitive, separable prefix attached
    de_pp: str  # participle
    frame: str  # acc | dat | ditr | intr | motion | wait | say
    subj: str  # noun tags allowed as subject
    obj: str = ""  # noun tags allowed as object
    aux: str = "haben"
    prefix: str = ""  # separable prefix
    du: str = ""  # irregular 2sg (without prefix)
    er: str = ""  # irregular 3sg (without prefix)
    ich: str = ""  # irregular 1sg


def _verbs() -> tuple[Verb, ...]:
    V = Verb
    return (
        # accusative objects
        V("read", "reads", "read", "lesen", "gelesen", "acc", "p", "r", du="liest", er="liest"),
        V("see", "sees", "seen", "sehen", "gesehen", "acc", "pa", "patP", du="siehst", er="sieht"),
        V("buy", "buys", "bought", "kaufen", "gekauft", "acc", "p", "t"),
        V("eat", "eats", "eaten", "essen", "gegessen", "acc", "pa", "f", du="isst", er="isst"),
        V("find", "finds", "found", "finden", "gefunden", "acc", "pa", "ta"),
        V("look for", "looks for", "looked for", "suchen", "gesucht", "acc", "pa", "tpa"),
        V("need", "needs", "needed", "brauchen", "gebraucht", "acc", "p", "t"),
        V(
            "like",
            "likes",
            "liked",
            "mögen",
            "gemocht",
            "acc",
            "pa",
            "paft",
            ich="mag",
            du="magst",
            er="mag",
        ),
        V("love", "loves", "loved", "lieben", "geliebt", "acc", "p", "pa"),
        V(
            "carry",
            "carries",
            "carried",
            "tragen",
            "getragen",
            "acc",
            "p",
            "t",
            du="trägst",
            er="trägt",
        ),
        V("open", "opens", "opened", "öffnen", "geöffnet", "acc", "p", "o"),
        V("close", "closes", "closed", "schließen", "geschlossen", "acc", "p", "o"),
        V("take", "takes", "taken", "nehmen", "genommen", "acc", "p", "t", du="nimmst", er="nimmt"),
        V("write", "writes", "written", "schreiben", "geschrieben", "acc", "p", "w"),
        V("draw", "draws", "drawn", "zeichnen", "gezeichnet", "acc", "p", "d"),
        V("paint", "paints", "painted", "malen", "gemalt", "acc", "p", "d"),
        V(
            "forget",
            "forgets",
            "forgotten",
            "vergessen",
            "vergessen",
            "acc",
            "p",
            "t",
            du="vergisst",
            er="vergisst",
        ),
        V("visit", "visits", "visited", "besuchen", "besucht", "acc", "p", "pB"),
        V("know", "knows", "known", "kennen", "gekannt", "acc", "p", "pP"),
        V("call", "calls", "called", "anrufen", "angerufen", "acc", "p", "p", prefix="an"),
        V(
            "invite",
            "invites",
            "invited",
            "einladen",
            "eingeladen",
            "acc",
            "p",
            "p",
            prefix="ein",
            du="lädst",
            er="lädt",
        ),
        V("pick up", "picks up", "picked up", "abholen", "abgeholt", "acc", "p", "pt", prefix="ab"),
        V("tidy", "tidies", "tidied", "aufräumen", "aufgeräumt", "acc", "p", "y", prefix="auf"),
        V(
            "wash",
            "washes",
            "washed",
            "waschen",
            "gewaschen",
            "acc",
            "p",
            "x",
            du="wäschst",
            er="wäscht",
        ),
        V("build", "builds", "built", "bauen", "gebaut", "acc", "p", "b"),
        V("hear", "hears", "heard", "hören", "gehört", "acc", "pa", "hpa"),
        V(
            "meet",
            "meets",
            "met",
            "treffen",
            "getroffen",
            "acc",
            "p",
            "p",
            du="triffst",
            er="trifft",
        ),
        V("ask", "asks", "asked", "fragen", "gefragt", "acc", "p", "p"),
        V(
            "catch",
            "catches",
            "caught",
            "fangen",
            "gefangen",
            "acc",
            "pa",
            "c",
            du="fängst",
            er="fängt",
        ),
        # dative objects
        V(
            "help",
            "helps",
            "helped",
            "helfen",
            "geholfen",
            "dat",
            "pa",
            "pa",
            du="hilfst",
            er="hilft",
        ),
        V("thank", "thanks", "thanked", "danken", "gedankt", "dat", "p", "p"),
        V("follow", "follows", "followed", "folgen", "gefolgt", "dat", "pa", "pa", aux="sein"),
        V("answer", "answers", "answered", "antworten", "geantwortet", "dat", "p", "p"),
        V("trust", "trusts", "trusted", "vertrauen", "vertraut", "dat", "p", "pa"),
        V("belong to", "belongs to", "belonged to", "gehören", "gehört", "dat", "ta", "p"),
        # accusative + optional dative ("to X")
        V("give", "gives", "given", "geben", "gegeben", "ditr", "p", "g", du="gibst", er="gibt"),
        V("show", "shows", "shown", "zeigen", "gezeigt", "ditr", "p", "t"),
        V("bring", "brings", "brought", "bringen", "gebracht", "ditr", "p", "t"),
        V("send", "sends", "sent", "schicken", "geschickt", "ditr", "p", "g"),
        V("tell", "tells", "told", "erzählen", "erzählt", "ditr", "p", "e"),
        V("sell", "sells", "sold", "verkaufen", "verkauft", "ditr", "p", "t"),
        # intransitive
        V(
            "sleep",
            "sleeps",
            "slept",
            "schlafen",
            "geschlafen",
            "intr",
            "pa",
            du="schläfst",
            er="schläft",
        ),
        V("work", "works", "worked", "arbeiten", "gearbeitet", "intr", "p"),
        V("play", "plays", "played", "spielen", "gespielt", "intr", "pa"),
        V("sing", "sings", "sung", "singen", "gesungen", "intr", "p"),
        V("dance", "dances", "danced", "tanzen", "getanzt", "intr", "p"),
        V("laugh", "laughs", "laughed", "lachen", "gelacht", "intr", "p"),
        V("cry", "cries", "cried", "weinen", "geweint", "intr", "p"),
        V("wait", "waits", "waited", "warten", "gewartet", "wait", "pa", "pav"),
        # motion (perfect with sein)
        V("go", "goes", "gone", "gehen", "gegangen", "motion", "p", aux="sein"),
        V("come", "comes", "come", "kommen", "gekommen", "motion", "pa", aux="sein"),
        V(
            "run",
            "runs",
            "run",
            "laufen",
            "gelaufen",
            "motion",
            "pa",
            aux="sein",
            du="läufst",
            er="läuft",
        ),
        V(
            "drive",
            "drives",
            "driven",
            "fahren",
            "gefahren",
            "motion",
            "p",
            aux="sein",
            du="fährst",
            er="fährt",
        ),
        V("fly", "flies", "flown", "fliegen", "geflogen", "motion", "p", aux="sein"),
        V("travel", "travels", "traveled", "reisen", "gereist", "motion", "p", aux="sein"),
        V("swim", "swims", "swum", "schwimmen", "geschwommen", "motion", "pa", aux="sein"),
        # clausal complements ("that" -> ", dass")
        V("say", "says", "said", "sagen", "gesagt", "say", "p"),
        V("think", "thinks", "thought", "denken", "gedacht", "say", "p"),
        V("believe", "believes", "believed", "glauben", "geglaubt", "say", "p"),
        V(
            "know",
            "knows",
            "known",
            "wissen",
            "gewusst",
            "say",
            "p",
            ich="weiß",
            du="weißt",
            er="weiß",
        ),
        V("hope", "hopes", "hoped", "hoffen", "gehofft", "say", "p"),
    )


VERBS = _verbs()
_BE = Verb("be", "is", "been", "sein", "gewesen", "pred", "patP", aux="sein")
_BY_FRAME: dict[str, tuple[Verb, ...]] = {}
for _v in VERBS:
    _BY_FRAME.setdefault(_v.frame, ())
    _BY_FRAME[_v.frame] += (_v,)

_IRREGULAR = {
    "sein": ("bin", "bist", "ist", "sind", "sind"),
    "haben": ("habe", "hast", "hat", "haben", "haben"),
    "können": ("kann", "kannst", "kann", "können", "können"),
    "müssen": ("muss", "musst", "muss", "müssen", "müssen"),
    "wollen": ("will", "willst", "will", "wollen", "wollen"),
    "sollen": ("soll", "sollst", "soll", "sollen", "sollen"),
    "dürfen": ("darf", "darfst", "darf", "dürfen", "dürfen"),
}
_PERSON_INDEX = {"1sg": 0, "2sg": 1, "3sg": 2, "1pl": 3, "3pl": 4}

# English modal -> (German modal, German modal when negated)
_MODALS = {
    "can": ("können", "können"),
    "must": ("müssen", "dürfen"),
    "should": ("sollen", "sollen"),
    "want": ("wollen", "wollen"),
}

# person key -> (en subj, en obj, de nom, de acc, de dat, German person, gender)
_PRONOUNS = {
    "1sg": ("I", "me", "ich", "mich", "mir", "1sg"),
    "2sg": ("you", "you", "du", "dich", "dir", "2sg"),
    "3sgm": ("he", "him", "er", "ihn", "ihm", "3sg"),
    "3sgf": ("she", "her", "sie", "sie", "ihr", "3sg"),
    "1pl": ("we", "us", "wir", "uns", "uns", "1pl"),
    "3pl": ("they", "them", "sie", "sie", "ihnen", "3pl"),
}

# determiner key -> (English singular, English plural, German kind, German stem)
_DETS = {
    "the": ("the", "the", "def", ""),
    "this": ("this", "these", "der", "dies"),
    "a": ("a", None, "ein", "ein"),
    "kein": (None, None, "ein", "kein"),
    "my": ("my", "my", "ein", "mein"),
    "your": ("your", "your", "ein", "dein"),
    "his": ("his", "his", "ein", "sein"),
    "her": ("her", "her", "ein", "ihr"),
    "our": ("our", "our", "ein", "unser"),
    "their": ("their", "their", "ein", "ihr"),
    "two": (None, "two", "num", "zwei"),
    "three": (None, "three", "num", "drei"),
    "four": (None, "four", "num", "vier"),
    "many": (None, "many", "strong", "viel"),
    "some": (None, "some", "strong", "einig"),
    "bare": (None, "", "bare", ""),
}
_SG_DETS = (("the", 45), ("a", 22), ("this", 7), ("my", 6), ("your", 4), ("his", 4),
            ("her", 4), ("our", 4), ("their", 4))  # fmt: skip
_PL_DETS = (("the", 35), ("this", 6), ("bare", 18), ("two", 6), ("three", 4), ("four", 3),
            ("many", 6), ("some", 6), ("my", 4), ("our", 4), ("their", 4), ("his", 2),
            ("her", 2))  # fmt: skip

_G = {"m": 0, "f": 1, "n": 2, "pl": 3}
_DEF_ART = {
    "nom": ("der", "die", "das", "die"),
    "acc": ("den", "die", "das", "die"),
    "dat": ("dem", "der", "dem", "den"),
}
_DER_END = {
    "nom": ("er", "e", "es", "e"),
    "acc": ("en", "e", "es", "e"),
    "dat": ("em", "er", "em", "en"),
}
_EIN_END = {
    "nom": ("", "e", "", "e"),
    "acc": ("en", "e", "", "e"),
    "dat": ("em", "er", "em", "en"),
}
_ADJ_WEAK = {
    "nom": ("e", "e", "e", "en"),
    "acc": ("en", "e", "e", "en"),
    "dat": ("en", "en", "en", "en"),
}
_ADJ_MIXED = {
    "nom": ("er", "e", "es", "en"),
    "acc": ("en", "e", "es", "en"),
    "dat": ("en", "en", "en", "en"),
}
_ADJ_STRONG_PL = {"nom": "e", "acc": "e", "dat": "en"}

# (English, German, case, noun tags)
_LOC_PREPS = (
    ("in", "in", "dat", "B"),
    ("on", "auf", "dat", "s"),
    ("at", "an", "dat", "A"),
    ("under", "unter", "dat", "u"),
    ("behind", "hinter", "dat", "l"),
    ("in front of", "vor", "dat", "l"),
    ("next to", "neben", "dat", "l"),
)
_DIR_PREPS = (
    ("to", "zu", "dat", "P"),
    ("into", "in", "acc", "B"),
    ("from", "von", "dat", "P"),
    ("through", "durch", "acc", "R"),
    ("across", "über", "acc", "X"),
)
_ADJUNCT_PREPS = (
    ("with", "mit", "dat", "pa"),
    ("for", "für", "acc", "pa"),
    ("without", "ohne", "acc", "pa"),
)
_CONTRACT = {
    ("in", "dat", "m"): "im",
    ("in", "dat", "n"): "im",
    ("in", "acc", "n"): "ins",
    ("an", "dat", "m"): "am",
    ("an", "dat", "n"): "am",
    ("zu", "dat", "m"): "zum",
    ("zu", "dat", "n"): "zum",
    ("zu", "dat", "f"): "zur",
    ("von", "dat", "m"): "vom",
    ("von", "dat", "n"): "vom",
}
_TIME = (
    ("today", "heute"),
    ("tomorrow", "morgen"),
    ("now", "jetzt"),
    ("every day", "jeden Tag"),
    ("in the morning", "am Morgen"),
    ("in the evening", "am Abend"),
    ("on Monday", "am Montag"),
    ("on Friday", "am Freitag"),
    ("on Sunday", "am Sonntag"),
)
_FREQ = (
    ("often", "oft"),
    ("always", "immer"),
    ("sometimes", "manchmal"),
    ("rarely", "selten"),
    ("usually", "meistens"),
)
_MANNER = (
    ("quickly", "schnell"),
    ("slowly", "langsam"),
    ("loudly", "laut"),
    ("quietly", "leise"),
    ("carefully", "vorsichtig"),
    ("well", "gut"),
)
_SUBORD = (
    ("because", "weil"),
    ("although", "obwohl"),
    ("while", "während"),
    ("if", "wenn"),
    ("before", "bevor"),
    ("as soon as", "sobald"),
)
_WH = (("where", "wo"), ("when", "wann"), ("why", "warum"))
_COORD = (("and", "und", False), ("but", "aber", True))


def lexicon_sizes() -> dict[str, int]:
    """Number of lexical entries (lemmas/senses) per word class."""
    return {
        "nouns": len(NOUNS),
        "adjectives": len(ADJS),
        "verbs": len(VERBS) + 1 + len(_MODALS),
        "prepositions": len(_LOC_PREPS) + len(_DIR_PREPS) + len(_ADJUNCT_PREPS),
        "adverbs": len(_TIME) + len(_FREQ) + len(_MANNER),
        "conjunctions": len(_SUBORD) + len(_COORD) + 1,
    }


# ---------------------------------------------------------------------------
# Abstract syntax
# ---------------------------------------------------------------------------


@dataclass
class NP:
    noun: Noun | None = None
    number: str = "sg"
    det: str = "the"
    adj: Adj | None = None
    very: bool = False
    pron: str | None = None  # key of _PRONOUNS
    coord: tuple[NP, NP] | None = None
    rel: Clause | None = None  # subject relative clause
    kein: bool = False  # realised with kein- (negation of an indefinite)
    relative: bool = False  # relative pronoun: English "who", German der/die/das

    @property
    def person(self) -> str:
        if self.pron is not None:
            return _PRONOUNS[self.pron][5]
        if self.coord is not None or self.number == "pl":
            return "3pl"
        return "3sg"


@dataclass
class PP:
    en: str
    de: str
    case: str
    np: NP


@dataclass
class Clause:
    verb: Verb
    subj: NP
    acc: NP | None = None
    dat: NP | None = None
    tense: str = "pres"  # pres | perf | modal
    modal: str | None = None
    neg: bool = False
    time: tuple[str, str] | None = None
    time_front: bool = False
    freq: tuple[str, str] | None = None
    manner: tuple[str, str] | None = None
    pps: list[PP] = field(default_factory=list)
    pred_adj: Adj | None = None
    pred_very: bool = False
    comp: Clause | None = None
    wh: tuple[str, str] | None = None


# ---------------------------------------------------------------------------
# German realisation
# ---------------------------------------------------------------------------


def _de_present(verb: Verb, person: str) -> str:
    """Finite present form without separable prefix."""
    inf = verb.de[len(verb.prefix) :]
    if inf in _IRREGULAR:
        return _IRREGULAR[inf][_PERSON_INDEX[person]]
    if person in ("1pl", "3pl"):
        return inf
    if person == "1sg" and verb.ich:
        return verb.ich
    if person == "2sg" and verb.du:
        return verb.du
    if person == "3sg" and verb.er:
        return verb.er
    stem = inf[:-2]
    # e-insertion: arbeit-et, find-et, öffn-et, zeichn-et (but kenn-t, schwimm-t)
    prev = stem[-2]
    e_ins = stem[-1] in "td" or (
        stem[-1] in "nm" and prev not in "aeiouäöülrmn" and (prev != "h" or stem[-3] == "c")
    )
    if person == "1sg":
        return stem + "e"
    if person == "2sg":
        if e_ins:
            return stem + "est"
        return stem + ("t" if stem[-1] in "sßzx" else "st")
    return stem + ("et" if e_ins else "t")


def _de_adj(stem: str, ending: str) -> str:
    if stem.endswith("e") and ending.startswith("e"):
        return stem + ending[1:]
    return stem + ending


def _de_np(np: NP, case: str) -> list[str]:
    if np.pron is not None:
        return [_PRONOUNS[np.pron][{"nom": 2, "acc": 3, "dat": 4}[case]]]
    if np.coord is not None:
        return _de_np(np.coord[0], case) + ["und"] + _de_np(np.coord[1], case)
    noun = np.noun
    assert noun is not None
    g = _G["pl" if np.number == "pl" else noun.gender]
    if np.relative:
        return [_DEF_ART[case][g]]
    det = "kein" if np.kein else np.det
    kind, stem = _DETS[det][2], _DETS[det][3]
    out: list[str] = []
    if kind == "def":
        out.append(_DEF_ART[case][g])
        adj_end = _ADJ_WEAK[case][g]
    elif kind == "der":
        out.append(stem + _DER_END[case][g])
        adj_end = _ADJ_WEAK[case][g]
    elif kind == "ein":
        out.append(stem + _EIN_END[case][g])
        adj_end = _ADJ_MIXED[case][g]
    elif kind == "num":
        out.append(stem)
        adj_end = _ADJ_STRONG_PL[case]
    elif kind == "strong":
        out.append(stem + _ADJ_STRONG_PL[case])
        adj_end = _ADJ_STRONG_PL[case]
    else:
        adj_end = _ADJ_STRONG_PL[case]
    if np.adj is not None:
        if np.very:
            out.append("sehr")
        out.append(_de_adj(np.adj.de, adj_end))
    if np.number == "pl":
        form = noun.de_pl
        if case == "dat" and form[-1] not in "ns":
            form += "n"
    else:
        form = noun.weak if (noun.weak and case != "nom") else noun.de
    out.append(form)
    if np.rel is not None:
        out += [","] + _de_clause(np.rel, "sub") + [","]
    return out


def _de_pp(pp: PP) -> list[str]:
    np = pp.np
    if np.noun is not None and np.det == "the" and np.number == "sg" and not np.kein:
        short = _CONTRACT.get((pp.de, pp.case, np.noun.gender))
        if short is not None:
            return [short] + _de_np(np, pp.case)[1:]
    return [pp.de] + _de_np(np, pp.case)


def _de_verb_parts(cl: Clause) -> tuple[str, list[str], list[str]]:
    """Return (finite verb, main-clause clause-final part, subordinate verb cluster)."""
    person = cl.subj.person
    v = cl.verb
    if cl.tense == "perf":
        aux = _IRREGULAR[v.aux][_PERSON_INDEX[person]]
        return aux, [v.de_pp], [v.de_pp, aux]
    if cl.tense == "modal":
        assert cl.modal is not None
        modal_inf = _MODALS[cl.modal][1 if cl.neg else 0]
        fin = _IRREGULAR[modal_inf][_PERSON_INDEX[person]]
        return fin, [v.de], [v.de, fin]
    fin = _de_present(v, person)
    if v.prefix:
        return fin, [v.prefix], [v.prefix + fin]
    return fin, [], [fin]


def _de_middle(cl: Clause) -> list[str]:
    out: list[str] = []
    for np, case in ((cl.acc, "acc"), (cl.dat, "dat")):
        if np is not None and np.pron is not None:
            out += _de_np(np, case)
    if cl.time is not None and not cl.time_front:
        out += cl.time[1].split()
    if cl.freq is not None:
        out.append(cl.freq[1])
    for np, case in ((cl.dat, "dat"), (cl.acc, "acc")):
        if np is not None and np.pron is None:
            out += _de_np(np, case)
    negated_np = any(np is not None and np.kein for np in (cl.acc, cl.dat))
    if cl.neg and not negated_np:
        out.append("nicht")
    if cl.manner is not None:
        out.append(cl.manner[1])
    for pp in cl.pps:
        out += _de_pp(pp)
    if cl.pred_adj is not None:
        if cl.pred_very:
            out.append("sehr")
        out.append(cl.pred_adj.de)
    return out


def _de_clause(cl: Clause, mode: str) -> list[str]:
    """mode: decl (V2), question (V1 / wh + V2) or sub (verb-final)."""
    fin, final, cluster = _de_verb_parts(cl)
    subj = _de_np(cl.subj, "nom")
    middle = _de_middle(cl)
    extra = [",", "dass"] + _de_clause(cl.comp, "sub") if cl.comp is not None else []
    if mode == "sub":
        return subj + middle + cluster + extra
    if mode == "question":
        head = [cl.wh[1]] if cl.wh is not None else []
        return head + [fin] + subj + middle + final + extra
    if cl.time is not None and cl.time_front:
        return cl.time[1].split() + [fin] + subj + middle + final + extra
    return subj + [fin] + middle + final + extra


# ---------------------------------------------------------------------------
# English realisation
# ---------------------------------------------------------------------------


def _en_np(np: NP, case: str) -> list[str]:
    if np.pron is not None:
        return [_PRONOUNS[np.pron][0 if case == "nom" else 1]]
    if np.coord is not None:
        return _en_np(np.coord[0], case) + ["and"] + _en_np(np.coord[1], case)
    if np.relative:
        return ["who"]
    noun = np.noun
    assert noun is not None
    det = _DETS[np.det][0 if np.number == "sg" else 1]
    rest: list[str] = []
    if np.adj is not None:
        if np.very:
            rest.append("very")
        rest.append(np.adj.en)
    rest.append(noun.en if np.number == "sg" else noun.en_pl)
    if det == "a" and rest[0][0] in "aeiou":
        det = "an"
    out = ([det] if det else []) + rest
    if np.rel is not None:
        out += _en_clause(np.rel, "decl")
    return out


def _en_verb(cl: Clause, question: bool) -> tuple[list[str], list[str]]:
    """Return (auxiliary fronted in questions, verb group after the subject)."""
    third = cl.subj.person == "3sg"
    v = cl.verb
    base = v.en.split()
    freq = [cl.freq[0]] if cl.freq is not None else []
    neg = ["not"] if cl.neg else []
    if v.frame == "pred":
        be = {"1sg": "am", "3sg": "is"}.get(cl.subj.person, "are")
        return ([be], freq) if question else ([], [be] + neg + freq)
    if cl.tense == "perf":
        have = "has" if third else "have"
        pp = v.en_pp.split()
        return ([have], freq + pp) if question else ([], [have] + neg + freq + pp)
    if cl.tense == "modal":
        if cl.modal == "want":
            want = ["wants" if third else "want", "to"]
            if question:
                return ["does" if third else "do"], ["want", "to"] + base
            if cl.neg:
                return [], ["does" if third else "do", "not", "want", "to"] + base
            return [], want + base
        assert cl.modal is not None
        if question:
            return [cl.modal], base
        if cl.neg:
            return [], (["cannot"] if cl.modal == "can" else [cl.modal, "not"]) + base
        return [], [cl.modal] + freq + base
    do = "does" if third else "do"
    if question:
        return [do], freq + base
    if cl.neg:
        return [], [do, "not"] + base
    return [], freq + (v.en3 if third else v.en).split()


def _en_clause(cl: Clause, mode: str, with_subject: bool = True) -> list[str]:
    aux, group = _en_verb(cl, mode == "question")
    subj = _en_np(cl.subj, "nom") if with_subject else []
    rest: list[str] = []
    if cl.verb.frame == "ditr":
        assert cl.acc is not None
        rest += _en_np(cl.acc, "acc")
        if cl.dat is not None:
            rest += ["to"] + _en_np(cl.dat, "acc")
    elif cl.acc is not None:
        rest += _en_np(cl.acc, "acc")
    elif cl.dat is not None:
        rest += _en_np(cl.dat, "acc")
    if cl.pred_adj is not None:
        rest += (["very"] if cl.pred_very else []) + [cl.pred_adj.en]
    if cl.manner is not None:
        rest.append(cl.manner[0])
    for pp in cl.pps:
        rest += pp.en.split() + _en_np(pp.np, "acc")
    if cl.time is not None and not cl.time_front:
        rest += cl.time[0].split()
    if cl.comp is not None:
        rest += ["that"] + _en_clause(cl.comp, "decl")
    if mode == "question":
        head = [cl.wh[0]] if cl.wh is not None else []
        return head + aux + subj + group + rest
    front = cl.time[0].split() if (cl.time is not None and cl.time_front) else []
    return front + subj + group + rest


# ---------------------------------------------------------------------------
# Random generation
# ---------------------------------------------------------------------------


_CUM_CACHE: dict[int, tuple[tuple[str, ...], list[int], int]] = {}


def _weighted(rng: random.Random, items: tuple[tuple[str, int], ...]) -> str:
    table = _CUM_CACHE.get(id(items))
    if table is None:
        cum = list(itertools.accumulate(w for _, w in items))
        table = (tuple(i for i, _ in items), cum, cum[-1])
        _CUM_CACHE[id(items)] = table
    names, cum, total = table
    return names[bisect.bisect_right(cum, rng.randrange(total))]


def _nouns_with(tags: str) -> tuple[Noun, ...]:
    key = tags
    cached = _NOUN_CACHE.get(key)
    if cached is None:
        cached = tuple(n for n in NOUNS if any(t in n.tags for t in tags))
        _NOUN_CACHE[key] = cached
    return cached


_NOUN_CACHE: dict[str, tuple[Noun, ...]] = {}
_ADJ_CACHE: dict[str, tuple[Adj, ...]] = {}


def _adjs_for(noun: Noun) -> tuple[Adj, ...]:
    cached = _ADJ_CACHE.get(noun.en)
    if cached is None:
        cached = tuple(a for a in ADJS if any(t in noun.tags for t in a.tags))
        _ADJ_CACHE[noun.en] = cached
    return cached


def _make_np(
    rng: random.Random,
    tags: str,
    pron_p: float = 0.0,
    coord_p: float = 0.0,
    indef_ok: bool = True,
) -> NP:
    if pron_p and "p" in tags and rng.random() < pron_p:
        return NP(pron=rng.choice(tuple(_PRONOUNS)))
    if coord_p and "p" in tags and rng.random() < coord_p:
        a = _make_np(rng, "p", indef_ok=indef_ok)
        b = _make_np(rng, "p", indef_ok=indef_ok)
        if a.noun is b.noun:
            return a
        return NP(coord=(a, b))
    noun = rng.choice(_nouns_with(tags))
    number = "pl" if rng.random() < 0.28 else "sg"
    dets = _SG_DETS if number == "sg" else _PL_DETS
    det = _weighted(rng, dets)
    if not indef_ok and det in ("a", "bare", "some", "many", "two", "three", "four"):
        det = "the"
    if "P" in noun.tags and det in ("a", "bare", "some", "many", "two", "three", "four"):
        det = "the"  # places: keep PP contractions frequent and natural
    np = NP(noun=noun, number=number, det=det)
    if rng.random() < 0.3:
        adjs = _adjs_for(noun)
        if adjs:
            np.adj = rng.choice(adjs)
            np.very = np.adj.gradable and rng.random() < 0.15
    return np


def _make_pp(rng: random.Random, preps: tuple[tuple[str, str, str, str], ...]) -> PP:
    en, de, case, tags = rng.choice(preps)
    return PP(en, de, case, _make_np(rng, tags, pron_p=0.15 if "p" in tags else 0.0))


_FRAMES = (("acc", 34), ("ditr", 9), ("dat", 10), ("intr", 12), ("motion", 13),
           ("wait", 4), ("pred", 12), ("say", 6))  # fmt: skip


def _make_clause(
    rng: random.Random,
    *,
    allow_say: bool = True,
    allow_front: bool = True,
    allow_rel: bool = False,
    simple: bool = False,
) -> Clause:
    frame = _weighted(rng, _FRAMES)
    while frame == "say" and not allow_say:
        frame = _weighted(rng, _FRAMES)
    verb = _BE if frame == "pred" else rng.choice(_BY_FRAME[frame])
    subj = _make_np(rng, verb.subj, pron_p=0.22, coord_p=0.06)
    cl = Clause(verb=verb, subj=subj)
    if frame in ("acc", "ditr"):
        # no object pronouns with English particle verbs ("picks them up")
        obj_pron = 0.15 if frame == "acc" and not verb.en.endswith(" up") else 0.0
        cl.acc = _make_np(rng, verb.obj, pron_p=obj_pron)
        if frame == "ditr" and rng.random() < 0.7:
            cl.dat = _make_np(rng, "p", pron_p=0.2)
    elif frame == "dat":
        cl.dat = _make_np(rng, verb.obj, pron_p=0.2)
    elif frame == "wait" and rng.random() < 0.7:
        cl.pps.append(PP("for", "auf", "acc", _make_np(rng, verb.obj, pron_p=0.15)))
    elif frame == "pred":
        is_place = subj.noun is not None and "P" in subj.noun.tags
        if is_place or rng.random() < 0.7:
            head = subj.noun if subj.noun is not None else NOUNS[0]
            if subj.coord is not None:
                head = NOUNS[0]
            cl.pred_adj = rng.choice(_adjs_for(head))
            cl.pred_very = cl.pred_adj.gradable and rng.random() < 0.2
        else:
            cl.pps.append(_make_pp(rng, _LOC_PREPS))
    elif frame == "say":
        cl.comp = _make_clause(rng, allow_say=False, allow_front=False, simple=True)
    # no reflexives: an object pronoun never repeats a 1st/2nd person subject
    for np in (cl.acc, cl.dat, *(pp.np for pp in cl.pps)):
        if np is not None and np.pron is not None and np.pron == subj.pron:
            np.pron = "3pl" if np.pron != "3pl" else "3sgm"
    # tense / modality
    r = rng.random()
    if frame in ("pred",):
        pass
    elif frame == "say":
        if r < 0.25:
            cl.tense = "perf"
    elif r < 0.2:
        cl.tense = "perf"
    elif r < 0.4:
        cl.tense = "modal"
        cl.modal = _weighted(rng, (("can", 4), ("must", 2), ("should", 2), ("want", 3)))
    cl.neg = rng.random() < 0.15
    if cl.neg:
        target = cl.acc if frame in ("acc", "ditr") else cl.dat if frame == "dat" else None
        if target is not None and target.noun is not None:
            if target.det in ("two", "three", "four", "many", "some"):
                target.det = "the"
            if target.det in ("a", "bare"):
                target.kein = True
    if frame == "say":
        return cl
    if rng.random() < (0.1 if simple else 0.22):
        cl.time = rng.choice(_TIME)
        cl.time_front = allow_front and rng.random() < 0.5
    if not cl.neg and cl.tense != "modal" and rng.random() < (0.05 if simple else 0.1):
        cl.freq = rng.choice(_FREQ)
    if frame in ("acc", "intr", "motion", "ditr") and rng.random() < 0.08:
        cl.manner = rng.choice(_MANNER)
    if frame == "motion" and rng.random() < 0.85:
        cl.pps.append(_make_pp(rng, _DIR_PREPS))
    if frame != "pred" and rng.random() < (0.12 if simple else 0.25):
        preps = _LOC_PREPS if rng.random() < 0.6 else _ADJUNCT_PREPS
        if frame == "motion":
            preps = _ADJUNCT_PREPS  # keep location and direction apart
        if frame == "wait":
            preps = _LOC_PREPS  # "waits for X" is the verb's own argument
        cl.pps.insert(0, _make_pp(rng, preps))
    if allow_rel and not cl.time_front and subj.noun is not None and "p" in subj.noun.tags:
        if rng.random() < 0.35:
            subj.rel = _make_rel(rng, subj)
    return cl


def _make_rel(rng: random.Random, antecedent: NP) -> Clause:
    frame = _weighted(rng, (("acc", 5), ("intr", 2), ("dat", 2), ("motion", 1)))
    verb = rng.choice(tuple(v for v in _BY_FRAME[frame] if "p" in v.subj))
    rel = NP(noun=antecedent.noun, number=antecedent.number, relative=True)
    cl = Clause(verb=verb, subj=rel)
    if frame == "acc":
        cl.acc = _make_np(rng, verb.obj, pron_p=0.1)
    elif frame == "dat":
        cl.dat = _make_np(rng, verb.obj, pron_p=0.1)
    elif frame == "motion" or rng.random() < 0.3:
        cl.pps.append(_make_pp(rng, _DIR_PREPS if frame == "motion" else _LOC_PREPS))
    return cl


def _make_sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    kind = _weighted(
        rng, (("simple", 40), ("question", 14), ("sub", 18), ("coord", 10), ("rel", 10))
    )
    if kind == "simple":
        cl = _make_clause(rng)
        return _en_clause(cl, "decl") + ["."], _de_clause(cl, "decl") + ["."]
    if kind == "rel":
        cl = _make_clause(rng, allow_rel=True, allow_front=False)
        return _en_clause(cl, "decl") + ["."], _de_clause(cl, "decl") + ["."]
    if kind == "question":
        cl = _make_clause(rng, allow_front=False)
        cl.neg = False
        for np in (cl.acc, cl.dat):
            if np is not None:
                np.kein = False
        if cl.modal == "must":
            cl.modal = "can"
        if cl.verb.frame != "say" and rng.random() < 0.4:
            wh = rng.choice(_WH)
            if wh[0] == "where" and (cl.verb.frame in ("motion", "pred") or cl.pps):
                wh = _WH[2]
            if wh[0] == "when" and cl.time is not None:
                wh = _WH[2]
            cl.wh = wh
        return _en_clause(cl, "question") + ["?"], _de_clause(cl, "question") + ["?"]
    if kind == "sub":
        main = _make_clause(rng, allow_say=False, allow_front=False, simple=True)
        sub = _make_clause(rng, allow_say=False, allow_front=False, simple=True)
        en_c, de_c = rng.choice(_SUBORD)
        sub_en = en_c.split() + _en_clause(sub, "sub")
        sub_de = [de_c] + _de_clause(sub, "sub")
        if rng.random() < 0.35:
            # fronted subordinate clause: it fills the German Vorfeld (inversion)
            fin, final, _ = _de_verb_parts(main)
            main_de = [fin] + _de_np(main.subj, "nom") + _de_middle(main) + final
            return sub_en + [","] + _en_clause(main, "decl") + ["."], sub_de + [","] + main_de + [
                "."
            ]
        return _en_clause(main, "decl") + sub_en + ["."], _de_clause(main, "decl") + [
            ","
        ] + sub_de + ["."]
    # coordination of two main clauses
    a = _make_clause(rng, allow_say=False, simple=True)
    b = _make_clause(rng, allow_say=False, simple=True)
    en_c, de_c, comma = rng.choice(_COORD)
    sep_en = ([","] if comma else []) + [en_c]
    sep_de = ([","] if comma else []) + [de_c]
    return (
        _en_clause(a, "decl") + sep_en + _en_clause(b, "decl") + ["."],
        _de_clause(a, "decl") + sep_de + _de_clause(b, "decl") + ["."],
    )


def realise(cl: Clause, mode: str = "decl") -> tuple[str, str]:
    """Render one clause as an (English, German) sentence.

    ``mode`` is ``"decl"`` (main clause), ``"question"`` or ``"sub"`` (the bare
    subordinate clause, verb-final in German, without conjunction).
    """
    if mode not in ("decl", "question", "sub"):
        raise ValueError(f"unknown mode {mode!r}")
    end = ["?"] if mode == "question" else ["."]
    return _join(_en_clause(cl, mode) + end), _join(_de_clause(cl, mode) + end)


def noun(en: str) -> Noun:
    """Lexicon look-up of a noun by its English singular."""
    for n in NOUNS:
        if n.en == en:
            return n
    raise KeyError(en)


def adjective(en: str) -> Adj:
    """Lexicon look-up of an adjective by its English form."""
    for a in ADJS:
        if a.en == en:
            return a
    raise KeyError(en)


def verb(en: str, frame: str | None = None) -> Verb:
    """Lexicon look-up of a verb by English base form (and frame, for "know")."""
    if en == "be":
        return _BE
    for v in VERBS:
        if v.en == en and (frame is None or v.frame == frame):
            return v
    raise KeyError(en)


def _join(tokens: list[str]) -> str:
    out: list[str] = []
    for tok in tokens:
        if tok in _PUNCT and out:
            out[-1] += tok
        else:
            out.append(tok)
    text = " ".join(out)
    return text[0].upper() + text[1:]


def word_count(sentence: str) -> int:
    """Number of words, punctuation not counted."""
    return sum(1 for w in sentence.split() if w not in _PUNCT)


def generate_pairs(num: int, seed: int) -> list[tuple[str, str]]:
    """Return ``num`` (English, German) pairs with pairwise distinct English sides.

    Deterministic for a given seed; ``generate_pairs(n, s)`` is a prefix of
    ``generate_pairs(m, s)`` for ``n <= m``.
    """
    if num < 0:
        raise ValueError(f"num must be >= 0, got {num}")
    rng = random.Random(f"synthetic-translation-v{GENERATOR_VERSION}-{seed}")
    seen: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < num:
        attempts += 1
        if attempts > 50 * num + 1000:
            raise RuntimeError("synthetic generator cannot produce enough distinct sentences")
        en_toks, de_toks = _make_sentence(rng)
        n_en = len(en_toks) - sum(map(_PUNCT.__contains__, en_toks))
        n_de = len(de_toks) - sum(map(_PUNCT.__contains__, de_toks))
        if not (MIN_WORDS <= n_en <= MAX_WORDS and MIN_WORDS <= n_de <= MAX_WORDS):
            continue
        en, de = _join(en_toks), _join(de_toks)
        prev = seen.get(en)
        if prev is not None:
            if prev != de:
                raise AssertionError(f"ambiguous translation for {en!r}: {prev!r} vs {de!r}")
            continue
        seen[en] = de
        pairs.append((en, de))
    return pairs


# ---------------------------------------------------------------------------
# Corpus files
# ---------------------------------------------------------------------------


def _file_names() -> list[str]:
    return [f"{split}.{lang}" for split in SPLITS for lang in ("en", "de")]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _corpus_is_current(out: Path, params: dict) -> bool:
    meta_path = out / "corpus.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict) or meta.get("params") != params:
        return False
    hashes = meta.get("sha256", {})
    for name in _file_names():
        path = out / name
        if not path.is_file() or hashes.get(name) != _sha256(path):
            return False
    return True


def write_corpus(
    out_dir: str | os.PathLike[str],
    num_train: int = 20000,
    num_eval: int = 500,
    seed: int = 0,
) -> None:
    """Write train/valid/test .en/.de files (UTF-8, one sentence per line).

    valid and test hold ``num_eval`` lines each; no English sentence occurs in
    two splits.  Files are written atomically, and nothing is rewritten when
    ``corpus.json`` records the same parameters and the files' hashes match.
    """
    if num_train < 0 or num_eval < 0:
        raise ValueError("num_train and num_eval must be >= 0")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    params = {
        "generator": "transformer.data.synthetic",
        "version": GENERATOR_VERSION,
        "num_train": num_train,
        "num_eval": num_eval,
        "seed": seed,
    }
    if _corpus_is_current(out, params):
        return
    pairs = generate_pairs(num_train + 2 * num_eval, seed)
    splits = {
        "test": pairs[:num_eval],
        "valid": pairs[num_eval : 2 * num_eval],
        "train": pairs[2 * num_eval :],
    }
    hashes: dict[str, str] = {}
    for split in SPLITS:
        for idx, lang in enumerate(("en", "de")):
            name = f"{split}.{lang}"
            data = "".join(p[idx] + "\n" for p in splits[split]).encode("utf-8")
            atomic_write(out / name, data)
            hashes[name] = hashlib.sha256(data).hexdigest()
    meta = {"params": params, "sha256": hashes}
    atomic_write(out / "corpus.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
