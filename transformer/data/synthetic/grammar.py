"""The synthetic corpus's grammar: the abstract clause and its English and German text.

`NP`, `PP` and `Clause` describe a sentence independently of language (verb frame, noun
phrases, tense, modality, negation, adverbs, prepositional phrases, embedded clauses);
`en_clause` and `de_clause` realise one as a token list, applying the German rules the corpus
teaches (case and gender agreement, adjective endings, contractions, verb-second and
verb-final order, separable verbs, kein/nicht). `realise` renders a hand-built clause as a
pair of sentences and `join_tokens` turns tokens into cased, punctuated text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformer.data.synthetic.lexicon import (
    ADJ_MIXED,
    ADJ_STRONG_PL,
    ADJ_WEAK,
    CONTRACTIONS,
    DEF_ART,
    DER_END,
    DETS,
    EIN_END,
    GENDER_INDEX,
    IRREGULAR,
    MODALS,
    PERSON_INDEX,
    PRONOUNS,
    Adj,
    Noun,
    Verb,
)

PUNCTUATION = (",", ".", "?")  # attached to the preceding word, not counted as words

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
    pron: str | None = None  # key of PRONOUNS
    coord: tuple[NP, NP] | None = None
    rel: Clause | None = None  # subject relative clause
    kein: bool = False  # realised with kein- (negation of an indefinite)
    relative: bool = False  # relative pronoun: English "who", German der/die/das

    @property
    def person(self) -> str:
        if self.pron is not None:
            return PRONOUNS[self.pron][5]
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
    if inf in IRREGULAR:
        return IRREGULAR[inf][PERSON_INDEX[person]]
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


def de_np(np: NP, case: str) -> list[str]:
    if np.pron is not None:
        return [PRONOUNS[np.pron][{"nom": 2, "acc": 3, "dat": 4}[case]]]
    if np.coord is not None:
        return de_np(np.coord[0], case) + ["und"] + de_np(np.coord[1], case)
    noun = np.noun
    assert noun is not None
    g = GENDER_INDEX["pl" if np.number == "pl" else noun.gender]
    if np.relative:
        return [DEF_ART[case][g]]
    det = "kein" if np.kein else np.det
    kind, stem = DETS[det][2], DETS[det][3]
    out: list[str] = []
    if kind == "def":
        out.append(DEF_ART[case][g])
        adj_end = ADJ_WEAK[case][g]
    elif kind == "der":
        out.append(stem + DER_END[case][g])
        adj_end = ADJ_WEAK[case][g]
    elif kind == "ein":
        out.append(stem + EIN_END[case][g])
        adj_end = ADJ_MIXED[case][g]
    elif kind == "num":
        out.append(stem)
        adj_end = ADJ_STRONG_PL[case]
    elif kind == "strong":
        out.append(stem + ADJ_STRONG_PL[case])
        adj_end = ADJ_STRONG_PL[case]
    else:
        adj_end = ADJ_STRONG_PL[case]
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
        out += [","] + de_clause(np.rel, "sub") + [","]
    return out


def _de_pp(pp: PP) -> list[str]:
    np = pp.np
    if np.noun is not None and np.det == "the" and np.number == "sg" and not np.kein:
        short = CONTRACTIONS.get((pp.de, pp.case, np.noun.gender))
        if short is not None:
            return [short] + de_np(np, pp.case)[1:]
    return [pp.de] + de_np(np, pp.case)


def de_verb_parts(cl: Clause) -> tuple[str, list[str], list[str]]:
    """Return (finite verb, main-clause clause-final part, subordinate verb cluster)."""
    person = cl.subj.person
    v = cl.verb
    if cl.tense == "perf":
        aux = IRREGULAR[v.aux][PERSON_INDEX[person]]
        return aux, [v.de_pp], [v.de_pp, aux]
    if cl.tense == "modal":
        assert cl.modal is not None
        modal_inf = MODALS[cl.modal][1 if cl.neg else 0]
        fin = IRREGULAR[modal_inf][PERSON_INDEX[person]]
        return fin, [v.de], [v.de, fin]
    fin = _de_present(v, person)
    if v.prefix:
        return fin, [v.prefix], [v.prefix + fin]
    return fin, [], [fin]


def de_middle(cl: Clause) -> list[str]:
    out: list[str] = []
    for np, case in ((cl.acc, "acc"), (cl.dat, "dat")):
        if np is not None and np.pron is not None:
            out += de_np(np, case)
    if cl.time is not None and not cl.time_front:
        out += cl.time[1].split()
    if cl.freq is not None:
        out.append(cl.freq[1])
    for np, case in ((cl.dat, "dat"), (cl.acc, "acc")):
        if np is not None and np.pron is None:
            out += de_np(np, case)
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


def de_clause(cl: Clause, mode: str) -> list[str]:
    """mode: decl (V2), question (V1 / wh + V2) or sub (verb-final)."""
    fin, final, cluster = de_verb_parts(cl)
    subj = de_np(cl.subj, "nom")
    middle = de_middle(cl)
    extra = [",", "dass"] + de_clause(cl.comp, "sub") if cl.comp is not None else []
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
        return [PRONOUNS[np.pron][0 if case == "nom" else 1]]
    if np.coord is not None:
        return _en_np(np.coord[0], case) + ["and"] + _en_np(np.coord[1], case)
    if np.relative:
        return ["who"]
    noun = np.noun
    assert noun is not None
    det = DETS[np.det][0 if np.number == "sg" else 1]
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
        out += en_clause(np.rel, "decl")
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


def en_clause(cl: Clause, mode: str, with_subject: bool = True) -> list[str]:
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
        rest += ["that"] + en_clause(cl.comp, "decl")
    if mode == "question":
        head = [cl.wh[0]] if cl.wh is not None else []
        return head + aux + subj + group + rest
    front = cl.time[0].split() if (cl.time is not None and cl.time_front) else []
    return front + subj + group + rest


def realise(cl: Clause, mode: str = "decl") -> tuple[str, str]:
    """Render one clause as an (English, German) sentence.

    ``mode`` is ``"decl"`` (main clause), ``"question"`` or ``"sub"`` (the bare
    subordinate clause, verb-final in German, without conjunction).
    """
    if mode not in ("decl", "question", "sub"):
        raise ValueError(f"unknown mode {mode!r}")
    end = ["?"] if mode == "question" else ["."]
    return join_tokens(en_clause(cl, mode) + end), join_tokens(de_clause(cl, mode) + end)


def join_tokens(tokens: list[str]) -> str:
    """Text of a token list: punctuation attached to the word before, first letter upper."""
    out: list[str] = []
    for tok in tokens:
        if tok in PUNCTUATION and out:
            out[-1] += tok
        else:
            out.append(tok)
    text = " ".join(out)
    return text[0].upper() + text[1:]
