"""ModelConfig: every architecture switch of the Transformer, validated at construction."""

from __future__ import annotations

import dataclasses
from typing import Any

from transformer.common.registry import Registry
from transformer.model.activations import ACTIVATIONS
from transformer.model.dropout import check_rate
from transformer.model.normalization import NORMS, PLACEMENTS
from transformer.model.position_schemes import SCHEMES

# The fields whose values are registered classes: their registries (one per kind, open to
# the user's modules) list the valid names and build the chosen one.
REGISTERED: dict[str, Registry] = {
    "activation": ACTIVATIONS,
    "norm_position": PLACEMENTS,
    "norm_type": NORMS,
    "position": SCHEMES,
}
DTYPES = ("float32", "bfloat16")
# The tied output projection's operands: float32, or the compute dtype (bfloat16 products
# with float32 sums and float32 logits).
LOGITS_DTYPES = ("float32", "compute")
# einsum: this package's attention (attention.attend); xla / cudnn: jax.nn.dot_product_attention
# with that implementation (cudnn: fused flash attention on NVIDIA GPUs, bfloat16 only).
ATTENTION_IMPLS = ("einsum", "xla", "cudnn")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of an encoder-decoder Transformer.

    Field names are public API: config files set them as ``config.model.<field>``.
    """

    # Embedding rows; None = not yet known: a run takes it from its tokenizer
    # (`run_config.resolve_vocab_size`). A model can only be built with an int.
    vocab_size: int | None = None
    d_model: int = 512
    num_heads: int = 8
    # None = num_heads (multi-head); 1 = multi-query; in between = grouped-query attention.
    num_kv_heads: int | None = None
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_ff: int = 2048
    activation: str = "relu"
    norm_position: str = "post"
    norm_type: str = "layernorm"
    position: str = "sinusoidal"
    max_len: int = 256
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.0
    activation_dropout_rate: float = 0.0
    # Source and target share one embedding table (needs a shared vocabulary).
    share_embeddings: bool = True
    # Output projection = target embedding transposed.
    tie_output: bool = True
    # A learned bias [vocab_size] added to the logits (Marian's final_logits_bias; imported
    # OPUS-MT models have one).
    output_bias: bool = False
    # Compute dtype; parameters, logits, softmax and loss stay float32.
    dtype: str = "float32"
    # The tied output projection's product: 'float32' operands, or 'compute': in `dtype`
    # with float32 sums (the logits, softmax and loss stay float32 either way).
    logits_dtype: str = "float32"
    use_bias: bool = True
    norm_eps: float = 1e-6
    # Std of output-projection init of attention and FFN = xavier * residual_init_scale;
    # None = 1 / sqrt(2 * layers in that stack), so residual branches start small.
    residual_init_scale: float | None = None
    # T5-style relative position bias: number of buckets and the distance they cover.
    relative_buckets: int = 32
    relative_max_distance: int = 128
    rope_base: float = 10000.0
    # Attention kernel (ATTENTION_IMPLS). The fused ones return no probabilities and have no
    # attention dropout: sites that need either (analysis, attention_dropout_rate > 0 in
    # training) use einsum whatever this says.
    attention_impl: str = "einsum"

    def __post_init__(self):
        def positive_int(name):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

        for name in ("d_model", "num_heads", "d_ff", "max_len"):
            positive_int(name)
        if self.vocab_size is not None:
            positive_int("vocab_size")
        for name in ("num_encoder_layers", "num_decoder_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must divide d_model={self.d_model}; "
                f"valid num_heads: {_divisors(self.d_model)}"
            )
        if self.num_kv_heads is not None:
            positive_int("num_kv_heads")
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}; "
                    f"valid num_kv_heads: {_divisors(self.num_heads)} or None"
                )
        for name, registry in REGISTERED.items():
            registry.check(getattr(self, name))
        for name, valid in (
            ("dtype", DTYPES),
            ("logits_dtype", LOGITS_DTYPES),
            ("attention_impl", ATTENTION_IMPLS),
        ):
            value = getattr(self, name)
            if value not in valid:
                raise ValueError(
                    f"unknown {name} {value!r}; valid: {', '.join(repr(v) for v in valid)}"
                )
        for name in ("dropout_rate", "attention_dropout_rate", "activation_dropout_rate"):
            check_rate(name, getattr(self, name))
        if self.attention_impl == "cudnn" and self.dtype != "bfloat16":
            raise ValueError(
                "attention_impl='cudnn' needs dtype='bfloat16' (cuDNN's fused attention has no "
                "float32 kernel); set model.dtype or use attention_impl='xla'"
            )
        if self.logits_dtype == "compute" and not self.tie_output:
            raise ValueError(
                "logits_dtype='compute' applies to the tied output projection; set "
                "tie_output=True or logits_dtype='float32'"
            )
        for name, registry in REGISTERED.items():
            registry[getattr(self, name)].check(self)

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def gated(self) -> bool:
        """The feed-forward block has a gate projection (its activation says so)."""
        return ACTIVATIONS[self.activation].gated

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Builds a ModelConfig from a mapping (e.g. ``config.model``), rejecting unknown keys."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(
                f"unknown model field(s) {unknown}; valid fields: {', '.join(sorted(names))}"
            )
        return cls(**dict(values))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
