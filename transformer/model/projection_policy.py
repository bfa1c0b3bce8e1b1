"""How a network's linear layers hold their weights: the projection policy, chosen when the
network is built.

Training builds every linear layer as a `Dense` holding float32 [in, out] parameters
(`TRAINED`). Decoding builds a second network from the trained one's parameters
(`decoding_network.decoding_network`) under a `DecodeProjections` policy, whose layers hold
copies of the weights in the layouts a decode step multiplies fastest, made once per
parameter set. A decode step multiplies a few rows (batch x beams) by every decoder weight
matrix, so each matrix is streamed from memory for little arithmetic, and how it is laid out
decides the speed. benchmarks/experiments/matmul_shapes.py measures the shapes ('streamed'
weights): with 32 rows, XLA's CPU product reads a weight stored [out, in] (both operands
contracted on their minor axis, as PyTorch's nn.Linear stores it) faster than one stored
[in, out], the training layout; with 128 rows the training layout is as fast or faster.

Every linear layer is built for a place in the network (`PLACES`):

- 'step': the decoder blocks, run once per generated token. Under `DecodeProjections` each
  is a `Projected` copy in `step_layout` ('in_out' or 'out_in'; 'none' keeps the `Dense`),
  each self-attention's query, key and value weights side by side in one `Projected` (one
  product per step instead of three), and so is the output projection, computing in
  float32. With step_quantize='int8' the copies are int8 (`transformer.model.quantize`);
  with 'bfloat16' they are bfloat16 and each product takes bfloat16 operands with a float32
  sum;
- 'encoder' (the encoder blocks) and 'memory' (the cross-attention keys and values), run
  once per batch over hundreds of rows, where the training layout is as fast as any and
  int8 gains nothing: `memory_quantize='bfloat16'` gives them bfloat16 [in, out] copies,
  since CPUs with bfloat16 matrix units multiply many rows fastest that way; otherwise they
  stay `Dense`.

Copies are cast to the compute dtype once, not at every step; the trained network and its
float32 parameters are never touched. Float copies give the training layout's values up to
float32 summation order (tests/test_projection_policy.py).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from transformer.model.differentiation import AUTODIFF, Differentiation
from transformer.model.layers import Dense, Embed
from transformer.model.quantize import int8_matmul, quantize_columns

PLACES = ("encoder", "memory", "step")
LAYOUTS = ("auto", "in_out", "out_in", "none")  # decode.weight_layout; none: no float copies
QUANTIZE = ("none", "int8", "bfloat16")  # decode.quantize: the 'step' copies
MEMORY_QUANTIZE = ("none", "bfloat16")  # decode.encoder_quantize: the 'encoder'/'memory' copies
# 'auto': out_in up to this many rows per product (measured: 32 rows gain, 128 rows lose).
AUTO_OUT_IN_MAX_ROWS = 64


def resolve_layout(layout: str, rows: int) -> str:
    """'auto' -> 'out_in' for products of at most AUTO_OUT_IN_MAX_ROWS rows, else 'in_out'."""
    if layout != "auto":
        return layout
    return "out_in" if rows <= AUTO_OUT_IN_MAX_ROWS else "in_out"


class DecodeCopy(nnx.Variable):
    """A decode-time copy of trained weights: made from them once, never trained."""


class Projected(nnx.Module):
    """y = x @ W (+ b) from a decode-time copy of trained weights, computing in `dtype`.

    kernel: float [in, out] (layout 'in_out'), float [out, in] ('out_in') or int8 [in, out]
    with a per-output scale [out] ('int8'); bias [out] or None. `sources` names the trained
    layers copied, as attributes of this layer's parent: one `Dense` or `Embed` (a tied
    output projection), several side by side (("query", "key", "value")), or None for the
    trained layer of this layer's own name. Made by `Projected.of`.
    """

    def __init__(self, kernel, scale, bias, *, layout: str, quantize: str, dtype, sources):
        self.kernel = DecodeCopy(kernel)
        self.scale = None if scale is None else DecodeCopy(scale)
        self.bias = None if bias is None else DecodeCopy(bias)
        self.layout = layout
        self.quantize = quantize
        self.dtype = dtype
        self.sources = sources

    @classmethod
    def of(
        cls,
        kernels: list[jax.Array],
        biases: list[jax.Array] | None,
        *,
        layout: str,
        quantize: str,
        dtype,
        sources: tuple[str, ...] | None = None,
    ) -> Projected:
        """Copies computing [x @ k (+ b) for k, b in zip(kernels, biases)] side by side, from
        kernels [in, out_i] and biases [out_i]: int8 [in, out] with quantize='int8', else in
        `layout`, in bfloat16 (quantize='bfloat16') or `dtype`."""
        kernel = kernels[0] if len(kernels) == 1 else jnp.concatenate(kernels, axis=1)
        bias = None if biases is None else jnp.concatenate(biases).astype(dtype)
        meta = dict(quantize=quantize, dtype=dtype, sources=sources)
        if quantize == "int8":
            q, scale = quantize_columns(kernel)
            return cls(q, scale, bias, layout="int8", **meta)
        kernel = kernel.astype(jnp.bfloat16 if quantize == "bfloat16" else dtype)
        if layout == "out_in":
            kernel = kernel.T
        return cls(kernel, None, bias, layout=layout, **meta)

    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.kernel[...]
        if self.layout == "int8":
            y = int8_matmul(x, kernel, self.scale[...]).astype(self.dtype)
        elif self.layout == "out_in":
            y = jnp.einsum(
                "...k,nk->...n", x.astype(kernel.dtype), kernel, preferred_element_type=self.dtype
            )
        else:
            y = jnp.dot(x.astype(kernel.dtype), kernel, preferred_element_type=self.dtype)
        if self.bias is not None:
            y = y + self.bias[...]
        return y

    def copy_of(self, parent, name: str) -> Projected:
        """This layer, named `name` in its parent, with its copy made from the trained layers
        it names in `parent` (the trained counterpart of its parent)."""
        trained = [getattr(parent, source) for source in self.sources or (name,)]
        kernels = [_kernel_in_out(layer) for layer in trained]
        biases = None if self.bias is None else [layer.bias[...] for layer in trained]
        layout = "in_out" if self.layout == "int8" else self.layout
        return Projected.of(
            kernels,
            biases,
            layout=layout,
            quantize=self.quantize,
            dtype=self.dtype,
            sources=self.sources,
        )


def _kernel_in_out(layer) -> jax.Array:
    """A trained Dense's kernel [in, out], or a tied Embed's table transposed [d, V]."""
    if isinstance(layer, Embed):
        return layer.embedding[...].T
    return layer.kernel[...]


# ------------------------------------------------------------------------------- policies


class ProjectionPolicy:
    """What a network's linear layers are: Dense parameters (`TRAINED`) or decode copies.

    `fuse_trained_qkv`: self-attention multiplies its input by the query, key and value
    Dense kernels side by side in one product (`layers.fused_product`) instead of three; the
    parameters stay three layers, so checkpoints do not change (`TRAINED_FUSED_QKV`)."""

    fuse_trained_qkv = False

    def linear(
        self,
        place: str,
        d_in: int,
        d_out: int,
        *,
        use_bias: bool,
        dtype,
        rngs: nnx.Rngs,
        init_scale: float = 1.0,
        differentiation: Differentiation = AUTODIFF,
    ) -> nnx.Module:
        """The linear layer d_in -> d_out at `place` (one of PLACES)."""
        return Dense(
            d_in,
            d_out,
            use_bias=use_bias,
            dtype=dtype,
            rngs=rngs,
            init_scale=init_scale,
            differentiation=differentiation,
        )

    def fused_qkv(self, place: str, d_in: int, widths, *, use_bias: bool, dtype):
        """Self-attention's query, key and value projections as one layer of output widths
        (q, k, v), or None to keep three."""
        return None

    def output(self, cfg, *, rngs: nnx.Rngs):
        """The output projection d_model -> vocabulary (float32), or None when it is the
        tied target embedding's own `attend`."""
        if cfg.tie_output:
            return None
        return Dense(cfg.d_model, cfg.vocab_size, use_bias=False, dtype=jnp.float32, rngs=rngs)


TRAINED = ProjectionPolicy()


class FusedQkvProjections(ProjectionPolicy):
    """Trained Dense layers, self-attention's query, key and value in one product."""

    fuse_trained_qkv = True


TRAINED_FUSED_QKV = FusedQkvProjections()


@dataclasses.dataclass(frozen=True)
class DecodeProjections(ProjectionPolicy):
    """Decode-time copies (module docstring): step_layout 'in_out' | 'out_in' | 'none',
    step_quantize and memory_quantize as decode.quantize and decode.encoder_quantize."""

    step_layout: str
    step_quantize: str = "none"
    memory_quantize: str = "none"

    def __post_init__(self):
        if self.step_layout not in LAYOUTS[1:]:
            raise ValueError(f"step_layout {self.step_layout!r}: resolve 'auto' first")

    def _copy(self, place: str) -> tuple[str, str] | None:
        """(layout, quantize) of the copies at `place`, or None for the trained Dense."""
        if place != "step":
            return ("in_out", "bfloat16") if self.memory_quantize == "bfloat16" else None
        if self.step_layout == "none" and self.step_quantize == "none":
            return None
        layout = "in_out" if self.step_layout == "none" else self.step_layout
        return layout, self.step_quantize

    def linear(self, place, d_in, d_out, *, use_bias, dtype, rngs, **trained_only):
        copy = self._copy(place)
        if copy is None:
            return super().linear(
                place, d_in, d_out, use_bias=use_bias, dtype=dtype, rngs=rngs, **trained_only
            )
        return _projected_place(d_in, d_out, copy, use_bias=use_bias, dtype=dtype, sources=None)

    def fused_qkv(self, place, d_in, widths, *, use_bias, dtype):
        copy = self._copy(place)
        if place != "step" or copy is None:  # the encoder's run once per batch: kept apart
            return None
        sources = ("query", "key", "value")
        return _projected_place(
            d_in, sum(widths), copy, use_bias=use_bias, dtype=dtype, sources=sources
        )

    def output(self, cfg, *, rngs):
        copy = self._copy("step")
        if copy is None:
            return super().output(cfg, rngs=rngs)
        source = ("target_embedding",) if cfg.tie_output else ("output",)
        return _projected_place(
            cfg.d_model, cfg.vocab_size, copy, use_bias=False, dtype=jnp.float32, sources=source
        )


def _projected_place(d_in, d_out, copy, *, use_bias, dtype, sources) -> Projected:
    """A Projected of the right shapes for `copy` (layout, quantize), its values zeros until
    decoding_network copies the trained weights in."""
    layout, quantize = copy
    return Projected.of(
        [jnp.zeros((d_in, d_out), jnp.float32)],
        [jnp.zeros((d_out,), jnp.float32)] if use_bias else None,
        layout=layout,
        quantize=quantize,
        dtype=dtype,
        sources=sources,
    )
