"""Random sentences of the synthetic corpus, drawn from the grammar with a seeded RNG.

`make_sentence` draws one sentence kind (simple, question, subordinate, coordinated or with a
relative clause), fills its clauses from the lexicon with fixed probabilities and returns the
English and German token lists. Everything is driven by the one `random.Random` passed in, in
a fixed order of draws, so a seed always yields the same sentences.
"""

from __future__ import annotations

import bisect
import itertools
import random

from transformer.data.synthetic.grammar import (
    NP,
    PP,
    Clause,
    de_clause,
    de_middle,
    de_np,
    de_verb_parts,
    en_clause,
)
from transformer.data.synthetic.lexicon import (
    ADJS,
    ADJUNCT_PREPS,
    BE,
    BY_FRAME,
    COORDINATORS,
    DIR_PREPS,
    FREQUENCY_ADVERBS,
    LOC_PREPS,
    MANNER_ADVERBS,
    NOUNS,
    PL_DETS,
    PRONOUNS,
    SG_DETS,
    SUBORDINATORS,
    TIME_ADVERBS,
    WH_WORDS,
    Adj,
    Noun,
)

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
        return NP(pron=rng.choice(tuple(PRONOUNS)))
    if coord_p and "p" in tags and rng.random() < coord_p:
        a = _make_np(rng, "p", indef_ok=indef_ok)
        b = _make_np(rng, "p", indef_ok=indef_ok)
        if a.noun is b.noun:
            return a
        return NP(coord=(a, b))
    noun = rng.choice(_nouns_with(tags))
    number = "pl" if rng.random() < 0.28 else "sg"
    dets = SG_DETS if number == "sg" else PL_DETS
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


_FRAMES = (
    ("acc", 34),
    ("ditr", 9),
    ("dat", 10),
    ("intr", 12),
    ("motion", 13),
    ("wait", 4),
    ("pred", 12),
    ("say", 6),
)


def _make_clause(
    rng: random.Random,
    *,
    allow_say: bool = True,
    allow_front: bool = True,
    allow_rel: bool = False,
    simple: bool = False,
) -> Clause:
    # The draws happen in a fixed order (frame, subject, arguments, tense, negation,
    # adjuncts, relative clause): the corpus text depends on it.
    frame = _weighted(rng, _FRAMES)
    while frame == "say" and not allow_say:
        frame = _weighted(rng, _FRAMES)
    verb = BE if frame == "pred" else rng.choice(BY_FRAME[frame])
    subj = _make_np(rng, verb.subj, pron_p=0.22, coord_p=0.06)
    cl = Clause(verb=verb, subj=subj)
    _add_arguments(rng, cl)
    _avoid_reflexives(cl)
    _add_tense(rng, cl)
    _add_negation(rng, cl)
    if frame == "say":
        return cl
    _add_adjuncts(rng, cl, simple=simple, allow_front=allow_front)
    if allow_rel and not cl.time_front and subj.noun is not None and "p" in subj.noun.tags:
        if rng.random() < 0.35:
            subj.rel = _make_rel(rng, subj)
    return cl


def _add_arguments(rng: random.Random, cl: Clause) -> None:
    """The objects, predicate or complement clause that the verb's frame asks for."""
    frame, verb, subj = cl.verb.frame, cl.verb, cl.subj
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
            cl.pps.append(_make_pp(rng, LOC_PREPS))
    elif frame == "say":
        cl.comp = _make_clause(rng, allow_say=False, allow_front=False, simple=True)


def _avoid_reflexives(cl: Clause) -> None:
    """An object pronoun never repeats a 1st/2nd person subject (no reflexives)."""
    for np in (cl.acc, cl.dat, *(pp.np for pp in cl.pps)):
        if np is not None and np.pron is not None and np.pron == cl.subj.pron:
            np.pron = "3pl" if np.pron != "3pl" else "3sgm"


def _add_tense(rng: random.Random, cl: Clause) -> None:
    """Present, perfect or modal (predicates stay present, clausal verbs never modal)."""
    frame = cl.verb.frame
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


def _add_negation(rng: random.Random, cl: Clause) -> None:
    """Negates the clause; an indefinite object then takes kein- instead of nicht."""
    frame = cl.verb.frame
    cl.neg = rng.random() < 0.15
    if cl.neg:
        target = cl.acc if frame in ("acc", "ditr") else cl.dat if frame == "dat" else None
        if target is not None and target.noun is not None:
            if target.det in ("two", "three", "four", "many", "some"):
                target.det = "the"
            if target.det in ("a", "bare"):
                target.kein = True


def _add_adjuncts(rng: random.Random, cl: Clause, *, simple: bool, allow_front: bool) -> None:
    """Time, frequency and manner adverbs, the direction of motion and an adjunct PP."""
    frame = cl.verb.frame
    if rng.random() < (0.1 if simple else 0.22):
        cl.time = rng.choice(TIME_ADVERBS)
        cl.time_front = allow_front and rng.random() < 0.5
    if not cl.neg and cl.tense != "modal" and rng.random() < (0.05 if simple else 0.1):
        cl.freq = rng.choice(FREQUENCY_ADVERBS)
    if frame in ("acc", "intr", "motion", "ditr") and rng.random() < 0.08:
        cl.manner = rng.choice(MANNER_ADVERBS)
    if frame == "motion" and rng.random() < 0.85:
        cl.pps.append(_make_pp(rng, DIR_PREPS))
    if frame != "pred" and rng.random() < (0.12 if simple else 0.25):
        preps = LOC_PREPS if rng.random() < 0.6 else ADJUNCT_PREPS
        if frame == "motion":
            preps = ADJUNCT_PREPS  # keep location and direction apart
        if frame == "wait":
            preps = LOC_PREPS  # "waits for X" is the verb's own argument
        cl.pps.insert(0, _make_pp(rng, preps))


def _make_rel(rng: random.Random, antecedent: NP) -> Clause:
    frame = _weighted(rng, (("acc", 5), ("intr", 2), ("dat", 2), ("motion", 1)))
    verb = rng.choice(tuple(v for v in BY_FRAME[frame] if "p" in v.subj))
    rel = NP(noun=antecedent.noun, number=antecedent.number, relative=True)
    cl = Clause(verb=verb, subj=rel)
    if frame == "acc":
        cl.acc = _make_np(rng, verb.obj, pron_p=0.1)
    elif frame == "dat":
        cl.dat = _make_np(rng, verb.obj, pron_p=0.1)
    elif frame == "motion" or rng.random() < 0.3:
        cl.pps.append(_make_pp(rng, DIR_PREPS if frame == "motion" else LOC_PREPS))
    return cl


def make_sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    """One random sentence as (English tokens, German tokens), end punctuation included."""
    kind = _weighted(
        rng, (("simple", 40), ("question", 14), ("sub", 18), ("coord", 10), ("rel", 10))
    )
    if kind == "simple":
        cl = _make_clause(rng)
        return en_clause(cl, "decl") + ["."], de_clause(cl, "decl") + ["."]
    if kind == "rel":
        cl = _make_clause(rng, allow_rel=True, allow_front=False)
        return en_clause(cl, "decl") + ["."], de_clause(cl, "decl") + ["."]
    if kind == "question":
        cl = _make_question(rng)
        return en_clause(cl, "question") + ["?"], de_clause(cl, "question") + ["?"]
    if kind == "sub":
        return _subordinate_sentence(rng)
    return _coordinated_sentence(rng)


def _make_question(rng: random.Random) -> Clause:
    """A clause to ask: never negated, "must" asked as "can", sometimes with a wh-word."""
    cl = _make_clause(rng, allow_front=False)
    cl.neg = False
    for np in (cl.acc, cl.dat):
        if np is not None:
            np.kein = False
    if cl.modal == "must":
        cl.modal = "can"
    if cl.verb.frame != "say" and rng.random() < 0.4:
        wh = rng.choice(WH_WORDS)
        if wh[0] == "where" and (cl.verb.frame in ("motion", "pred") or cl.pps):
            wh = WH_WORDS[2]
        if wh[0] == "when" and cl.time is not None:
            wh = WH_WORDS[2]
        cl.wh = wh
    return cl


def _subordinate_sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    """A main clause with a subordinate clause after it or fronted before it."""
    main = _make_clause(rng, allow_say=False, allow_front=False, simple=True)
    sub = _make_clause(rng, allow_say=False, allow_front=False, simple=True)
    en_c, de_c = rng.choice(SUBORDINATORS)
    sub_en = en_c.split() + en_clause(sub, "sub")
    sub_de = [de_c] + de_clause(sub, "sub")
    if rng.random() < 0.35:
        # fronted subordinate clause: it fills the German Vorfeld (inversion)
        fin, final, _ = de_verb_parts(main)
        main_de = [fin] + de_np(main.subj, "nom") + de_middle(main) + final
        en = sub_en + [","] + en_clause(main, "decl") + ["."]
        return en, sub_de + [","] + main_de + ["."]
    en = en_clause(main, "decl") + sub_en + ["."]
    return en, de_clause(main, "decl") + [","] + sub_de + ["."]


def _coordinated_sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    """Two main clauses joined by "and" / "und" or ", but" / ", aber"."""
    a = _make_clause(rng, allow_say=False, simple=True)
    b = _make_clause(rng, allow_say=False, simple=True)
    en_c, de_c, comma = rng.choice(COORDINATORS)
    sep_en = ([","] if comma else []) + [en_c]
    sep_de = ([","] if comma else []) + [de_c]
    return (
        en_clause(a, "decl") + sep_en + en_clause(b, "decl") + ["."],
        de_clause(a, "decl") + sep_de + de_clause(b, "decl") + ["."],
    )
