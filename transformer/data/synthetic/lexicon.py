"""Word tables of the synthetic corpus: nouns, adjectives, verbs and closed classes.

Every entry pairs an English form with its German counterpart (plus the gender, plural,
conjugation and tag data the grammar needs); the order of each table is part of the corpus,
since the generator draws from them by index, so reordering or editing an entry changes the
generated sentences (bump `GENERATOR_VERSION` in `corpus` when you do). Also holds the German
inflection tables, `lexicon_sizes` and the look-ups `noun`, `adjective`, `verb`.
"""

from __future__ import annotations

from dataclasses import dataclass

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


_NOUN_ROWS = (
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
)
NOUNS = tuple(Noun(*r) for r in _NOUN_ROWS)


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


VERBS = (
    # accusative objects
    Verb("read", "reads", "read", "lesen", "gelesen", "acc", "p", "r", du="liest", er="liest"),
    Verb("see", "sees", "seen", "sehen", "gesehen", "acc", "pa", "patP", du="siehst", er="sieht"),
    Verb("buy", "buys", "bought", "kaufen", "gekauft", "acc", "p", "t"),
    Verb("eat", "eats", "eaten", "essen", "gegessen", "acc", "pa", "f", du="isst", er="isst"),
    Verb("find", "finds", "found", "finden", "gefunden", "acc", "pa", "ta"),
    Verb("look for", "looks for", "looked for", "suchen", "gesucht", "acc", "pa", "tpa"),
    Verb("need", "needs", "needed", "brauchen", "gebraucht", "acc", "p", "t"),
    Verb(
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
    Verb("love", "loves", "loved", "lieben", "geliebt", "acc", "p", "pa"),
    Verb(
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
    Verb("open", "opens", "opened", "öffnen", "geöffnet", "acc", "p", "o"),
    Verb("close", "closes", "closed", "schließen", "geschlossen", "acc", "p", "o"),
    Verb("take", "takes", "taken", "nehmen", "genommen", "acc", "p", "t", du="nimmst", er="nimmt"),
    Verb("write", "writes", "written", "schreiben", "geschrieben", "acc", "p", "w"),
    Verb("draw", "draws", "drawn", "zeichnen", "gezeichnet", "acc", "p", "d"),
    Verb("paint", "paints", "painted", "malen", "gemalt", "acc", "p", "d"),
    Verb(
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
    Verb("visit", "visits", "visited", "besuchen", "besucht", "acc", "p", "pB"),
    Verb("know", "knows", "known", "kennen", "gekannt", "acc", "p", "pP"),
    Verb("call", "calls", "called", "anrufen", "angerufen", "acc", "p", "p", prefix="an"),
    Verb(
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
    Verb("pick up", "picks up", "picked up", "abholen", "abgeholt", "acc", "p", "pt", prefix="ab"),
    Verb("tidy", "tidies", "tidied", "aufräumen", "aufgeräumt", "acc", "p", "y", prefix="auf"),
    Verb(
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
    Verb("build", "builds", "built", "bauen", "gebaut", "acc", "p", "b"),
    Verb("hear", "hears", "heard", "hören", "gehört", "acc", "pa", "hpa"),
    Verb(
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
    Verb("ask", "asks", "asked", "fragen", "gefragt", "acc", "p", "p"),
    Verb(
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
    Verb(
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
    Verb("thank", "thanks", "thanked", "danken", "gedankt", "dat", "p", "p"),
    Verb("follow", "follows", "followed", "folgen", "gefolgt", "dat", "pa", "pa", aux="sein"),
    Verb("answer", "answers", "answered", "antworten", "geantwortet", "dat", "p", "p"),
    Verb("trust", "trusts", "trusted", "vertrauen", "vertraut", "dat", "p", "pa"),
    Verb("belong to", "belongs to", "belonged to", "gehören", "gehört", "dat", "ta", "p"),
    # accusative + optional dative ("to X")
    Verb("give", "gives", "given", "geben", "gegeben", "ditr", "p", "g", du="gibst", er="gibt"),
    Verb("show", "shows", "shown", "zeigen", "gezeigt", "ditr", "p", "t"),
    Verb("bring", "brings", "brought", "bringen", "gebracht", "ditr", "p", "t"),
    Verb("send", "sends", "sent", "schicken", "geschickt", "ditr", "p", "g"),
    Verb("tell", "tells", "told", "erzählen", "erzählt", "ditr", "p", "e"),
    Verb("sell", "sells", "sold", "verkaufen", "verkauft", "ditr", "p", "t"),
    # intransitive
    Verb(
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
    Verb("work", "works", "worked", "arbeiten", "gearbeitet", "intr", "p"),
    Verb("play", "plays", "played", "spielen", "gespielt", "intr", "pa"),
    Verb("sing", "sings", "sung", "singen", "gesungen", "intr", "p"),
    Verb("dance", "dances", "danced", "tanzen", "getanzt", "intr", "p"),
    Verb("laugh", "laughs", "laughed", "lachen", "gelacht", "intr", "p"),
    Verb("cry", "cries", "cried", "weinen", "geweint", "intr", "p"),
    Verb("wait", "waits", "waited", "warten", "gewartet", "wait", "pa", "pav"),
    # motion (perfect with sein)
    Verb("go", "goes", "gone", "gehen", "gegangen", "motion", "p", aux="sein"),
    Verb("come", "comes", "come", "kommen", "gekommen", "motion", "pa", aux="sein"),
    Verb(
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
    Verb(
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
    Verb("fly", "flies", "flown", "fliegen", "geflogen", "motion", "p", aux="sein"),
    Verb("travel", "travels", "traveled", "reisen", "gereist", "motion", "p", aux="sein"),
    Verb("swim", "swims", "swum", "schwimmen", "geschwommen", "motion", "pa", aux="sein"),
    # clausal complements ("that" -> ", dass")
    Verb("say", "says", "said", "sagen", "gesagt", "say", "p"),
    Verb("think", "thinks", "thought", "denken", "gedacht", "say", "p"),
    Verb("believe", "believes", "believed", "glauben", "geglaubt", "say", "p"),
    Verb(
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
    Verb("hope", "hopes", "hoped", "hoffen", "gehofft", "say", "p"),
)
BE = Verb("be", "is", "been", "sein", "gewesen", "pred", "patP", aux="sein")


def _group_by_frame(verbs: tuple[Verb, ...]) -> dict[str, tuple[Verb, ...]]:
    """Frames in order of first use, each with its verbs in lexicon order."""
    groups: dict[str, list[Verb]] = {}
    for v in verbs:
        groups.setdefault(v.frame, []).append(v)
    return {frame: tuple(vs) for frame, vs in groups.items()}


BY_FRAME = _group_by_frame(VERBS)


IRREGULAR = {
    "sein": ("bin", "bist", "ist", "sind", "sind"),
    "haben": ("habe", "hast", "hat", "haben", "haben"),
    "können": ("kann", "kannst", "kann", "können", "können"),
    "müssen": ("muss", "musst", "muss", "müssen", "müssen"),
    "wollen": ("will", "willst", "will", "wollen", "wollen"),
    "sollen": ("soll", "sollst", "soll", "sollen", "sollen"),
    "dürfen": ("darf", "darfst", "darf", "dürfen", "dürfen"),
}
PERSON_INDEX = {"1sg": 0, "2sg": 1, "3sg": 2, "1pl": 3, "3pl": 4}

# English modal -> (German modal, German modal when negated)
MODALS = {
    "can": ("können", "können"),
    "must": ("müssen", "dürfen"),
    "should": ("sollen", "sollen"),
    "want": ("wollen", "wollen"),
}

# person key -> (en subj, en obj, de nom, de acc, de dat, German person, gender)
PRONOUNS = {
    "1sg": ("I", "me", "ich", "mich", "mir", "1sg"),
    "2sg": ("you", "you", "du", "dich", "dir", "2sg"),
    "3sgm": ("he", "him", "er", "ihn", "ihm", "3sg"),
    "3sgf": ("she", "her", "sie", "sie", "ihr", "3sg"),
    "1pl": ("we", "us", "wir", "uns", "uns", "1pl"),
    "3pl": ("they", "them", "sie", "sie", "ihnen", "3pl"),
}

# determiner key -> (English singular, English plural, German kind, German stem)
DETS = {
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
SG_DETS = (("the", 45), ("a", 22), ("this", 7), ("my", 6), ("your", 4), ("his", 4),
            ("her", 4), ("our", 4), ("their", 4))  # fmt: skip
PL_DETS = (("the", 35), ("this", 6), ("bare", 18), ("two", 6), ("three", 4), ("four", 3),
            ("many", 6), ("some", 6), ("my", 4), ("our", 4), ("their", 4), ("his", 2),
            ("her", 2))  # fmt: skip

GENDER_INDEX = {"m": 0, "f": 1, "n": 2, "pl": 3}
DEF_ART = {
    "nom": ("der", "die", "das", "die"),
    "acc": ("den", "die", "das", "die"),
    "dat": ("dem", "der", "dem", "den"),
}
DER_END = {
    "nom": ("er", "e", "es", "e"),
    "acc": ("en", "e", "es", "e"),
    "dat": ("em", "er", "em", "en"),
}
EIN_END = {
    "nom": ("", "e", "", "e"),
    "acc": ("en", "e", "", "e"),
    "dat": ("em", "er", "em", "en"),
}
ADJ_WEAK = {
    "nom": ("e", "e", "e", "en"),
    "acc": ("en", "e", "e", "en"),
    "dat": ("en", "en", "en", "en"),
}
ADJ_MIXED = {
    "nom": ("er", "e", "es", "en"),
    "acc": ("en", "e", "es", "en"),
    "dat": ("en", "en", "en", "en"),
}
ADJ_STRONG_PL = {"nom": "e", "acc": "e", "dat": "en"}

# (English, German, case, noun tags)
LOC_PREPS = (
    ("in", "in", "dat", "B"),
    ("on", "auf", "dat", "s"),
    ("at", "an", "dat", "A"),
    ("under", "unter", "dat", "u"),
    ("behind", "hinter", "dat", "l"),
    ("in front of", "vor", "dat", "l"),
    ("next to", "neben", "dat", "l"),
)
DIR_PREPS = (
    ("to", "zu", "dat", "P"),
    ("into", "in", "acc", "B"),
    ("from", "von", "dat", "P"),
    ("through", "durch", "acc", "R"),
    ("across", "über", "acc", "X"),
)
ADJUNCT_PREPS = (
    ("with", "mit", "dat", "pa"),
    ("for", "für", "acc", "pa"),
    ("without", "ohne", "acc", "pa"),
)
CONTRACTIONS = {
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
TIME_ADVERBS = (
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
FREQUENCY_ADVERBS = (
    ("often", "oft"),
    ("always", "immer"),
    ("sometimes", "manchmal"),
    ("rarely", "selten"),
    ("usually", "meistens"),
)
MANNER_ADVERBS = (
    ("quickly", "schnell"),
    ("slowly", "langsam"),
    ("loudly", "laut"),
    ("quietly", "leise"),
    ("carefully", "vorsichtig"),
    ("well", "gut"),
)
SUBORDINATORS = (
    ("because", "weil"),
    ("although", "obwohl"),
    ("while", "während"),
    ("if", "wenn"),
    ("before", "bevor"),
    ("as soon as", "sobald"),
)
WH_WORDS = (("where", "wo"), ("when", "wann"), ("why", "warum"))
COORDINATORS = (("and", "und", False), ("but", "aber", True))


def lexicon_sizes() -> dict[str, int]:
    """Number of lexical entries (lemmas/senses) per word class."""
    return {
        "nouns": len(NOUNS),
        "adjectives": len(ADJS),
        "verbs": len(VERBS) + 1 + len(MODALS),
        "prepositions": len(LOC_PREPS) + len(DIR_PREPS) + len(ADJUNCT_PREPS),
        "adverbs": len(TIME_ADVERBS) + len(FREQUENCY_ADVERBS) + len(MANNER_ADVERBS),
        "conjunctions": len(SUBORDINATORS) + len(COORDINATORS) + 1,
    }


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
        return BE
    for v in VERBS:
        if v.en == en and (frame is None or v.frame == frame):
            return v
    raise KeyError(en)
