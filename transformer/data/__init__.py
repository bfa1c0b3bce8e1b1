"""Data: SentencePiece tokenizers, TFDS/ArrayRecord sources and the Grain input pipeline.

Entry point for training, eval and decoding: `make_datasets`; `load_split` gives raw
``(source, target)`` text pairs. The modules: `tokenizer` (SentencePiece models and the
per-run vocabularies), `parallel_files` (local ``{split}.{lang}`` files: finding, reading,
validating), `text_builder` (the TFDS builder that prepares them as ArrayRecord),
`text_splits` (`load_split`, `TextPairs`, TFDS datasets), `synthetic` (the embedded corpus),
`tokenized` (splits as flat token arrays, decoding source batches), `layout` (the batch
format and `BatchLayout`), `planner` (which pairs go into which rows), `sampling` (subword
regularisation of the training stream), `stream` (the Grain training stream and its
checkpointable state), `eval_split` (`EvalSplit`) and `bundle`
(`make_datasets`, `DataBundle`).

Imports from: transformer.common.
"""

from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer.data.bundle import DataBundle, TrainStats, make_datasets
from transformer.data.eval_split import EvalSplit
from transformer.data.layout import BATCH_KEYS, BatchLayout, make_layout
from transformer.data.sampling import check_subword_sampling
from transformer.data.text_splits import TextPairs, load_split
from transformer.data.tokenized import (
    TokenizedPairs,
    source_batch,
    tokenize_pairs,
    tokenize_sources,
)
from transformer.data.tokenizer import Tokenizer, build_tokenizers, check_vocab_config

__all__ = [
    "BATCH_KEYS",
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "BatchLayout",
    "DataBundle",
    "EvalSplit",
    "TextPairs",
    "TokenizedPairs",
    "Tokenizer",
    "TrainStats",
    "build_tokenizers",
    "check_subword_sampling",
    "check_vocab_config",
    "tokenize_sources",
    "load_split",
    "make_datasets",
    "make_layout",
    "source_batch",
    "tokenize_pairs",
]
