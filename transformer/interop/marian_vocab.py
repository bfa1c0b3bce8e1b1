"""Marian's vocabulary in this project's id space, as SentencePiece models.

A MarianMTModel's ids come from vocab.json, one vocabulary joining the pieces of both
SentencePiece models (source.spm, target.spm): `</s>` is usually 0, `<unk>` 1 and `<pad>`
the last id, and decoding starts from `decoder_start_token_id` (the pad row in converted
OPUS-MT models). This project's tokenizers are SentencePiece models whose own ids are the
model's, with PAD, UNK, BOS and EOS fixed (`transformer.common.special_ids`), and decoding
starts from BOS. An import therefore reorders Marian's rows: our id i holds Marian's row
`rows[i]` (embedding row and logit), in this order:

- PAD, UNK, BOS, EOS: Marian's pad, unk, decoder start and eos rows. When decoding starts
  from the pad row (Marian's default), that row is held twice, so the imported model has
  one row more than Marian's and the PAD and BOS logits are equal;
- every other id of vocab.json, in Marian's order;
- the pieces a SentencePiece model holds but vocab.json lacks, which MarianTokenizer maps
  to unk: each keeps its place in segmentation under an id of its own whose row is unk's;
- Marian's rows that vocab.json names no piece for, as spare rows no tokenizer produces.

Each side's SentencePiece model is rewritten with that one piece list: a piece of the list
the side's model lacks is UNUSED there (never produced), and the side's own pieces keep
their scores and types, so segmentation is the side's own and both sides share the ids one
embedding table needs. Exporting a run reverses nothing: vocab.json is written in our ids
and the decoder starts from BOS (`marian.marian_config`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, UNK_ID

# Our special ids' pieces: the names this project's SentencePiece trainer gives them.
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}


@dataclasses.dataclass(frozen=True)
class VocabMap:
    """Our id space of an imported Marian model."""

    pieces: list[str]  # our id -> piece, for the ids the tokenizers hold
    rows: np.ndarray  # our id -> Marian row (embedding row and logit), [our vocab_size]


def vocab_map(
    vocab: dict[str, int], marian_rows: int, special: dict[int, int], extra_pieces: list[str]
) -> VocabMap:
    """The reordering of the module docstring. special: {our special id: Marian id} for
    PAD, UNK, BOS and EOS; extra_pieces: the SentencePiece pieces vocab.json lacks."""
    names = _names_by_id(vocab, marian_rows)
    for i in special.values():
        if not isinstance(i, int) or not 0 <= i < marian_rows:
            raise UserError(
                f"config.json gives a special token (decoder start, pad or eos) the id "
                f"{i!r}, not a row of the model's vocab_size={marian_rows}"
            )
    taken = set(special.values())
    named = [i for i in sorted(names) if i not in taken]
    for i in named:
        if names[i] in SPECIAL_PIECES.values():
            raise UserError(
                f"vocab.json names id {i} {names[i]!r}, a piece this project reserves for a "
                "special token that config.json gives another id; only vocabularies whose "
                "special pieces are the model's special ids can be imported"
            )
    unnamed = [i for i in range(marian_rows) if i not in names and i not in taken]
    order = sorted(SPECIAL_PIECES)
    pieces = [SPECIAL_PIECES[i] for i in order] + [names[i] for i in named] + list(extra_pieces)
    rows = [special[i] for i in order] + named + [special[UNK_ID]] * len(extra_pieces) + unnamed
    return VocabMap(pieces, np.asarray(rows, np.int64))


def _names_by_id(vocab: dict[str, int], marian_rows: int) -> dict[int, str]:
    """{Marian id: piece}, every id checked to be a row of the model and named once."""
    names = {}
    for piece, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < marian_rows:
            raise UserError(
                f"vocab.json maps {piece!r} to {i!r}, not a row of the model's "
                f"vocab_size={marian_rows}; the vocabulary does not belong to these weights"
            )
        if i in names:
            raise UserError(
                f"vocab.json maps both {names[i]!r} and {piece!r} to id {i}; each id needs "
                "one piece"
            )
        names[i] = piece
    return names


def _model_pb2():
    from sentencepiece import sentencepiece_model_pb2

    return sentencepiece_model_pb2


def _text_types():
    """The piece types segmentation produces (not control, unknown or unused pieces)."""
    piece = _model_pb2().ModelProto.SentencePiece
    return {piece.NORMAL, piece.USER_DEFINED, piece.BYTE}


def _parse(proto: bytes, where: str):
    model = _model_pb2().ModelProto()
    try:
        model.ParseFromString(proto)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise UserError(f"{where} is not a SentencePiece model ({type(e).__name__})") from None
    return model


def unlisted_pieces(proto: bytes, vocab: dict[str, int], where: str) -> list[str]:
    """The pieces segmentation may produce from the model `proto` that vocab.json lacks, in
    the model's order (MarianTokenizer maps each to unk)."""
    types = _text_types()
    return [
        p.piece
        for p in _parse(proto, where).pieces
        if p.type in types and p.piece not in vocab and p.piece not in SPECIAL_PIECES.values()
    ]


def remapped_model(proto: bytes, pieces: list[str], where: str) -> bytes:
    """The SentencePiece model `proto` with `pieces` as its ids (module docstring): its own
    pieces keep their scores and types, the others are UNUSED, and the special ids are
    this project's."""
    model = _parse(proto, where)
    piece_type = _model_pb2().ModelProto.SentencePiece
    types = _text_types()
    own = {p.piece: p for p in model.pieces if p.type in types}
    special_types = {PAD_ID: "CONTROL", UNK_ID: "UNKNOWN", BOS_ID: "CONTROL", EOS_ID: "CONTROL"}
    del model.pieces[:]
    for i, piece in enumerate(pieces):
        entry = model.pieces.add(piece=piece, score=0.0, type=piece_type.UNUSED)
        if i in special_types:
            entry.type = getattr(piece_type, special_types[i])
        elif piece in own:
            entry.score, entry.type = own[piece].score, own[piece].type
    spec = model.trainer_spec
    for name, i in SPECIAL_IDS.items():
        setattr(spec, f"{name}_id", i)
        setattr(spec, f"{name}_piece", SPECIAL_PIECES[i])
    spec.vocab_size = len(pieces)
    return model.SerializeToString()


def marian_vocab(source_tokenizer, target_tokenizer) -> dict[str, int]:
    """vocab.json of a run's tokenizers: {piece: our id}. Marian has one joint vocabulary,
    so both sides must give each id the same piece, with this project's special pieces."""
    sizes = {source_tokenizer.vocab_size, target_tokenizer.vocab_size}
    if len(sizes) != 1:
        raise UserError(
            f"the source and target tokenizers hold {sorted(sizes)} pieces; a Marian model "
            "has one vocabulary for both sides: export runs with a shared vocabulary"
        )
    vocab = {}
    for i in range(source_tokenizer.vocab_size):
        piece = source_tokenizer.id_to_piece(i)
        if piece != target_tokenizer.id_to_piece(i):
            raise UserError(
                f"the source and target tokenizers give id {i} different pieces; a Marian "
                "model has one vocabulary for both sides: export runs with a shared vocabulary"
            )
        if SPECIAL_PIECES.get(i, piece) != piece:
            raise UserError(
                f"the tokenizer names special id {i} {piece!r}; Marian's tokenizer needs "
                f"{SPECIAL_PIECES[i]!r} there"
            )
        vocab[piece] = i
    return vocab
