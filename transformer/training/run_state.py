"""A run's model and train state as its checkpoints hold them: the model built from its
config, the train state's shapes without allocating it, the dict a checkpoint stores, and
the tokenizer fingerprints in each checkpoint's metadata that tie it to the run's
vocabularies. The training loop and `transformer.evaluation.restore` share these.
"""

from __future__ import annotations

import jax
from flax import nnx

from transformer.common.errors import UserError
from transformer.model.differentiation import Differentiation
from transformer.model.dropout import BIT_SOURCES, DropoutBits
from transformer.model.projection_policy import TRAINED, TRAINED_FUSED_QKV
from transformer.model.transformer import Transformer
from transformer.training.steps import TrainState, init_state


def build_model(model_cfg, seed: int) -> Transformer:
    return Transformer(model_cfg, rngs=nnx.Rngs(params=seed))


# The platforms where the hand-written backward products pay (train.hand_written_vjps='auto'):
# the CPU, where profiles showed XLA transposing the wide operand (docs/performance.md, "The
# loss and the tied embedding's gradients are written by hand").
HAND_WRITTEN_VJPS_AUTO = ("cpu",)


# train.dropout_bits='auto': the dropout bit source per platform. On GPUs XLA's Philox
# RngBitGenerator is one cheap kernel where threefry's rounds are a long integer chain
# (benchmarks/gpu_side_by_side.sh times threefry beside it, arm big-threefry); on the CPU the
# two cost the same (docs/performance.md), and threefry keeps the masks of earlier runs.
DROPOUT_BITS_AUTO = {"gpu": "philox"}


def build_train_model(model_cfg, train_config) -> Transformer:
    """The model a run trains: initialised from train.seed, differentiated as the train
    section says (train.remat, train.hand_written_vjps), drawing dropout bits from
    train.dropout_bits and multiplying self-attention's query, key and value layers as one
    product with train.fused_qkv; the choices travel in the graphdef."""
    differentiation = Differentiation(
        remat_blocks=train_config.remat == "block",
        hand_written_vjps=uses_hand_written_vjps(train_config.hand_written_vjps),
    )
    rngs = nnx.Rngs(params=int(train_config.seed))
    fused = bool(train_config.get("fused_qkv", False))
    return Transformer(
        model_cfg,
        rngs=rngs,
        differentiation=differentiation,
        projections=TRAINED_FUSED_QKV if fused else TRAINED,
        dropout_bits=dropout_bits(train_config.get("dropout_bits", "threefry")),
    )


def dropout_bits(setting: str, platform: str | None = None) -> DropoutBits:
    """train.dropout_bits resolved on `platform` (default: JAX's default backend)."""
    if setting == "auto":
        setting = DROPOUT_BITS_AUTO.get(platform or jax.default_backend(), "threefry")
    return BIT_SOURCES[setting]


def uses_hand_written_vjps(setting: str, platform: str | None = None) -> bool:
    """train.hand_written_vjps resolved on `platform` (default: JAX's default backend)."""
    if setting == "auto":
        return (platform or jax.default_backend()) in HAND_WRITTEN_VJPS_AUTO
    return setting == "on"


def abstract_train_state(model_cfg, optimizer):
    """Shapes and dtypes of the train state, without allocating it."""

    def make():
        return init_state(build_model(model_cfg, 0), optimizer)[1]

    return jax.eval_shape(make)


def state_dict(state: TrainState) -> dict:
    """The train state in the form a checkpoint stores it."""
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state}


# A checkpoint whose metadata holds this key stores parameters alone, no optimizer state or
# data position: weights imported from another toolkit (transformer.interop), the key's value
# saying from where. Training starts from them with a fresh optimizer and data stream.
WEIGHTS_ONLY = "weights_only"


def tokenizer_fingerprints(data) -> dict:
    """Hashes of the run's vocabularies, stored in each checkpoint's metadata."""
    return {side: getattr(data, f"{side}_tokenizer").fingerprint for side in ("source", "target")}


def check_tokenizers(meta: dict, data, checkpoint: str) -> None:
    """The run's tokenizers must be the ones its checkpoint was trained with: a vocabulary of
    the same size but other pieces would load and silently translate garbage."""
    saved = (meta or {}).get("tokenizers")
    if not saved:
        return  # a checkpoint written before fingerprints were recorded
    for side, fingerprint in tokenizer_fingerprints(data).items():
        if saved.get(side) != fingerprint:
            tok = getattr(data, f"{side}_tokenizer")
            raise UserError(
                f"the {side} tokenizer {tok.path or ''} (fingerprint {fingerprint}) is not the "
                f"one {checkpoint} was trained with ({saved.get(side)}); restore the run's "
                "vocab/ directory or the original data.vocab_path"
            )
