"""Data: SentencePiece tokenizers, TFDS/ArrayRecord sources and the Grain input pipeline.

Entry point for training, eval and decoding: `make_datasets` (see `pipeline` for the batch
format and the iterator state). `load_split` gives raw ``(source, target)`` text pairs.

Imports from: transformer.common.
"""

from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer.data.pipeline import (
    BATCH_KEYS,
    BatchLayout,
    DataBundle,
    EvalSplit,
    TokenizedPairs,
    TrainStats,
    encode_sources,
    make_datasets,
    make_layout,
    source_batch,
    tokenize_pairs,
)
from transformer.data.sources import TextPairs, load_split
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
    "check_vocab_config",
    "encode_sources",
    "load_split",
    "make_datasets",
    "make_layout",
    "source_batch",
    "tokenize_pairs",
]
