"""Tests for the embedded synthetic English -> German corpus."""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

import pytest

from transformer.data import synthetic as syn
from transformer.data.synthetic import NP, PP, Clause, adjective, noun, realise, verb
from transformer.data.synthetic.grammar import _de_present
from transformer.data.synthetic.lexicon import IRREGULAR, VERBS

FILES = [f"{split}.{lang}" for split in ("train", "valid", "test") for lang in ("en", "de")]


def _read(directory: Path, name: str) -> list[str]:
    data = (directory / name).read_bytes()
    text = data.decode("utf-8")  # strict: raises on invalid UTF-8
    assert text.endswith("\n")
    return text.split("\n")[:-1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synthetic")
    syn.write_corpus(out, num_train=3000, num_eval=200, seed=0)
    return out


@pytest.fixture(scope="module")
def default_corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synthetic_default")
    syn.write_corpus(out)
    return out


# ---------------------------------------------------------------------------
# Files, splits, determinism
# ---------------------------------------------------------------------------


def test_files_and_line_counts(corpus: Path) -> None:
    for name in FILES:
        assert (corpus / name).is_file()
    counts = {"train": 3000, "valid": 200, "test": 200}
    for split, n in counts.items():
        en, de = _read(corpus, f"{split}.en"), _read(corpus, f"{split}.de")
        assert len(en) == len(de) == n
    meta = json.loads((corpus / "corpus.json").read_text(encoding="utf-8"))
    assert meta["params"]["seed"] == 0
    assert meta["params"]["num_train"] == 3000


def test_default_sizes_and_global_properties(default_corpus: Path) -> None:
    sizes = {"train": 20000, "valid": 500, "test": 500}
    seen: dict[str, str] = {}
    split_of: dict[str, str] = {}
    for split, n in sizes.items():
        en, de = _read(default_corpus, f"{split}.en"), _read(default_corpus, f"{split}.de")
        assert len(en) == len(de) == n
        for e, d in zip(en, de, strict=True):
            # the mapping is a function, and splits are disjoint on the English side
            assert seen.setdefault(e, d) == d
            assert split_of.setdefault(e, split) == split, e
    assert len(seen) == sum(sizes.values())


def test_deterministic_and_seed_dependent(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    syn.write_corpus(a, num_train=500, num_eval=50, seed=3)
    syn.write_corpus(b, num_train=500, num_eval=50, seed=3)
    syn.write_corpus(c, num_train=500, num_eval=50, seed=4)
    for name in [*FILES, "corpus.json"]:
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / "train.en").read_bytes() != (c / "train.en").read_bytes()
    assert (a / "test.de").read_bytes() != (c / "test.de").read_bytes()


def test_generate_pairs_is_deterministic_prefix_and_unique() -> None:
    small = syn.generate_pairs(300, seed=11)
    large = syn.generate_pairs(600, seed=11)
    assert small == large[:300]
    assert small == syn.generate_pairs(300, seed=11)
    assert small != syn.generate_pairs(300, seed=12)
    assert len({e for e, _ in large}) == len(large)


def test_splits_disjoint_and_aligned(corpus: Path) -> None:
    splits = {s: _read(corpus, f"{s}.en") for s in ("train", "valid", "test")}
    assert not set(splits["train"]) & set(splits["valid"])
    assert not set(splits["train"]) & set(splits["test"])
    assert not set(splits["valid"]) & set(splits["test"])
    # alignment: each line pair is exactly what the generator produced
    pairs = syn.generate_pairs(3400, seed=0)
    assert (
        list(zip(_read(corpus, "test.en"), _read(corpus, "test.de"), strict=True)) == (pairs[:200])
    )
    assert (
        list(zip(_read(corpus, "train.en"), _read(corpus, "train.de"), strict=True))
        == (pairs[400:])
    )


def test_skip_rewrite_when_identical(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "c"
    syn.write_corpus(out, num_train=200, num_eval=20, seed=5)
    stats = {n: os.stat(out / n) for n in [*FILES, "corpus.json"]}
    syn.write_corpus(out, num_train=200, num_eval=20, seed=5)
    for n, st in stats.items():
        new = os.stat(out / n)
        assert (new.st_ino, new.st_mtime_ns) == (st.st_ino, st.st_mtime_ns), n
    # a tampered file or different parameters trigger a rewrite
    (out / "valid.de").write_text("kaputt\n", encoding="utf-8")
    syn.write_corpus(out, num_train=200, num_eval=20, seed=5)
    assert len(_read(out, "valid.de")) == 20
    syn.write_corpus(out, num_train=100, num_eval=20, seed=5)
    assert len(_read(out, "train.en")) == 100
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        syn.write_corpus(tmp_path, num_train=-1)
    with pytest.raises(ValueError):
        syn.generate_pairs(-1, seed=0)


# ---------------------------------------------------------------------------
# Surface form
# ---------------------------------------------------------------------------


def test_lengths_punctuation_and_spacing(corpus: Path) -> None:
    for name in FILES:
        for line in _read(corpus, name):
            assert syn.MIN_WORDS <= syn.word_count(line) <= syn.MAX_WORDS, line
            assert line[-1] in ".?", line
            assert line == line.strip() and "  " not in line, line
            assert " ," not in line and " ." not in line and " ?" not in line, line
            assert line[0].isupper(), line


def test_utf8_and_umlauts(corpus: Path) -> None:
    de = "\n".join(_read(corpus, "train.de"))
    for ch in "äöüß":
        assert ch in de
    en = "\n".join(_read(corpus, "train.en"))
    assert set(en) <= set(string.ascii_letters + " ,.?\n")


def test_lengths_are_varied(corpus: Path) -> None:
    lengths = {syn.word_count(line) for line in _read(corpus, "train.en")}
    assert min(lengths) <= 5 and max(lengths) >= 18


def test_phenomena_present(corpus: Path) -> None:
    de = "\n".join(_read(corpus, "train.de"))
    for marker in [", weil ", ", dass ", " kein", " im ", " zum ", "?", " nicht"]:
        assert marker in de, marker
    assert any(line.startswith(("Heute ", "Morgen ", "Jetzt ")) for line in de.split("\n"))


# ---------------------------------------------------------------------------
# Grammar rules on constructed sentences
# ---------------------------------------------------------------------------


def np_(en: str, det: str = "the", number: str = "sg", adj: str | None = None, **kw) -> NP:
    return NP(noun=noun(en), det=det, number=number, adj=adjective(adj) if adj else None, **kw)


def test_accusative_articles() -> None:
    cl = Clause(verb=verb("see"), subj=np_("man"), acc=np_("woman"))
    assert realise(cl) == ("The man sees the woman.", "Der Mann sieht die Frau.")
    cl = Clause(verb=verb("see"), subj=np_("woman"), acc=np_("man"))
    assert realise(cl) == ("The woman sees the man.", "Die Frau sieht den Mann.")
    cl = Clause(verb=verb("see"), subj=np_("woman"), acc=np_("child"))
    assert realise(cl)[1] == "Die Frau sieht das Kind."
    cl = Clause(verb=verb("see"), subj=np_("woman"), acc=np_("boy"))
    assert realise(cl)[1] == "Die Frau sieht den Jungen."  # weak masculine noun


def test_dative_after_mit_and_dative_verbs() -> None:
    for en, art in [("dog", "dem"), ("cat", "der"), ("horse", "dem")]:
        cl = Clause(verb=verb("play"), subj=np_("child"), pps=[PP("with", "mit", "dat", np_(en))])
        assert realise(cl)[1].endswith(f" spielt mit {art} {noun(en).de}.")
    cl = Clause(
        verb=verb("play"),
        subj=np_("child"),
        pps=[PP("with", "mit", "dat", np_("dog", number="pl"))],
    )
    assert realise(cl) == ("The child plays with the dogs.", "Das Kind spielt mit den Hunden.")
    cl = Clause(verb=verb("help"), subj=np_("man"), dat=np_("woman"))
    assert realise(cl)[1] == "Der Mann hilft der Frau."
    cl = Clause(verb=verb("give"), subj=np_("man"), acc=np_("book"), dat=np_("woman"))
    assert realise(cl) == (
        "The man gives the book to the woman.",
        "Der Mann gibt der Frau das Buch.",
    )


def test_contractions() -> None:
    cl = Clause(verb=verb("sleep"), subj=np_("dog"), pps=[PP("in", "in", "dat", np_("garden"))])
    assert realise(cl)[1] == "Der Hund schläft im Garten."
    cl = Clause(verb=verb("go"), subj=np_("woman"), pps=[PP("to", "zu", "dat", np_("school"))])
    assert realise(cl)[1] == "Die Frau geht zur Schule."
    cl = Clause(verb=verb("go"), subj=np_("woman"), pps=[PP("into", "in", "acc", np_("house"))])
    assert realise(cl)[1] == "Die Frau geht ins Haus."


def test_adjective_inflection() -> None:
    def de(subj: NP, obj: NP) -> str:
        return realise(Clause(verb=verb("see"), subj=subj, acc=obj))[1]

    assert de(np_("man", "a", adj="big"), np_("dog", "a", adj="old")) == (
        "Ein großer Mann sieht einen alten Hund."
    )
    assert de(np_("child", "a", adj="small"), np_("child", "a", adj="small")) == (
        "Ein kleines Kind sieht ein kleines Kind."
    )
    assert de(np_("woman", adj="tired"), np_("man", "this", adj="old")) == (
        "Die müde Frau sieht diesen alten Mann."
    )
    assert de(np_("dog", "bare", "pl", adj="big"), np_("cat", "two", "pl", adj="black")) == (
        "Große Hunde sehen zwei schwarze Katzen."
    )
    cl = Clause(verb=verb("be"), subj=np_("woman"), pred_adj=adjective("tired"))
    assert realise(cl) == ("The woman is tired.", "Die Frau ist müde.")  # predicative


def test_conjugation_by_person() -> None:
    forms = {}
    for pron in ("1sg", "2sg", "3sgf", "1pl", "3pl"):
        cl = Clause(verb=verb("read"), subj=NP(pron=pron), acc=np_("book"))
        forms[pron] = realise(cl)
    assert forms["1sg"] == ("I read the book.", "Ich lese das Buch.")
    assert forms["2sg"] == ("You read the book.", "Du liest das Buch.")
    assert forms["3sgf"] == ("She reads the book.", "Sie liest das Buch.")
    assert forms["1pl"] == ("We read the book.", "Wir lesen das Buch.")
    cl = Clause(verb=verb("drive"), subj=np_("man"))
    assert realise(cl)[1] == "Der Mann fährt."


def test_subordinate_clause_verb_last() -> None:
    cl = Clause(verb=verb("read"), subj=np_("man"), acc=np_("book"))
    en, de = realise(cl, "sub")
    assert de == "Der Mann das Buch liest."
    cl = Clause(verb=verb("call"), subj=np_("man"), acc=np_("woman"))
    assert realise(cl, "decl")[1] == "Der Mann ruft die Frau an."  # separable verb
    assert realise(cl, "sub")[1] == "Der Mann die Frau anruft."
    cl = Clause(verb=verb("read"), subj=np_("man"), acc=np_("book"), tense="perf")
    assert realise(cl, "sub")[1] == "Der Mann das Buch gelesen hat."
    cl = Clause(verb=verb("read"), subj=np_("man"), acc=np_("book"), tense="modal", modal="can")
    assert realise(cl, "sub")[1] == "Der Mann das Buch lesen kann."
    # embedded in a full sentence: "..., dass <subject> ... <verb>."
    say = Clause(verb=verb("say", "say"), subj=np_("woman"), comp=cl)
    assert realise(say) == (
        "The woman says that the man can read the book.",
        "Die Frau sagt, dass der Mann das Buch lesen kann.",
    )


def test_corpus_subordinate_clauses_end_with_verb(corpus: Path) -> None:
    finite = set()
    for v in [*VERBS, verb("be")]:
        for person in ("1sg", "2sg", "3sg", "1pl", "3pl"):
            finite.add(v.prefix + _de_present(v, person))
    for forms in IRREGULAR.values():
        finite.update(forms)
    checked = 0
    for line in _read(corpus, "train.de"):
        for conj in (", weil ", ", dass ", ", obwohl "):
            if conj in line:
                clause = line.split(conj, 1)[1]
                last = clause.split(",")[0].rstrip(".?").split()[-1]
                assert last in finite, line
                checked += 1
    assert checked > 50


def test_time_adverb_inversion_and_negation() -> None:
    cl = Clause(
        verb=verb("read"),
        subj=np_("man"),
        acc=np_("book"),
        time=("today", "heute"),
        time_front=True,
    )
    assert realise(cl) == ("Today the man reads the book.", "Heute liest der Mann das Buch.")
    cl = Clause(verb=verb("read"), subj=np_("man"), acc=np_("book"), neg=True)
    assert realise(cl) == ("The man does not read the book.", "Der Mann liest das Buch nicht.")
    cl = Clause(verb=verb("read"), subj=np_("man"), acc=np_("book", "a", kein=True), neg=True)
    assert realise(cl) == ("The man does not read a book.", "Der Mann liest kein Buch.")
    cl = Clause(verb=verb("read"), subj=np_("man"), acc=np_("book"))
    assert realise(cl, "question") == ("Does the man read the book?", "Liest der Mann das Buch?")
