"""Embedded, deterministic synthetic English -> German translation corpus.

The project's default training run uses this task so that it needs no download. A small
grammar generates an abstract clause and realises it twice, as English-like and as
German-like text (pure Python, standard library only, driven by ``random.Random(seed)``);
docs/synthetic_corpus.md lists the translation phenomena it exercises. The parts:
`lexicon` (word tables, `lexicon_sizes` and the look-ups `noun`, `verb`, `adjective`),
`grammar` (`NP`/`PP`/`Clause` and their English and German realisation, `realise`),
`sentences` (random sentences from a seeded RNG) and `corpus` (`generate_pairs`,
`write_corpus` and its freshness check). The lexicon is one-to-one per sense and every rule
is systematic, so the German sentence is a function of the English one (checked while
generating); sentences have 4-25 words on both sides and are cased, punctuated and
space-normal.
"""

from transformer.data.synthetic.corpus import (
    GENERATOR_VERSION,
    MAX_WORDS,
    MIN_WORDS,
    SPLITS,
    generate_pairs,
    word_count,
    write_corpus,
)
from transformer.data.synthetic.grammar import NP, PP, Clause, realise
from transformer.data.synthetic.lexicon import (
    Adj,
    Noun,
    Verb,
    adjective,
    lexicon_sizes,
    noun,
    verb,
)

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
