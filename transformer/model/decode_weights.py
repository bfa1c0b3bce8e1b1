"""Decode-time copies of the decoder's weights, in the layouts a decode step multiplies fastest.

A decode step multiplies a few rows (batch x beams) by every decoder weight matrix, so each
matrix is streamed from memory for little arithmetic, and how it is laid out decides the speed.
benchmarks/experiments/matmul_shapes.py measures the shapes ('streamed' weights): with 32 rows,
XLA's CPU product reads a weight stored [out, in] (both operands contracted on their minor
axis, as PyTorch's nn.Linear stores it) faster than one stored [in, out], the training layout;
with 128 rows the training layout is as fast or faster. `prepare_decoder(model, layout,
quantize)` gives, in place, on a model merged inside the jitted decode function:

- every dense layer the decode loop runs a `Projection` (`Dense.decode_projection`);
- each self-attention one `Projection` holding the query, key and value weights side by side
  (`Attention.decode_qkv`): one product per step instead of three;
- the output projection one (`Transformer.decode_output`).

Weights are cast to the compute dtype once, not at every step. The float32 parameters are
untouched and training never sees any of it. With quantize='int8' the copies are int8
(`transformer.model.quantize`). With quantize='bfloat16' they are bfloat16 and each product
takes bfloat16 operands with a float32 sum; `prepare_encoder` gives the layers that run once
per batch (the encoder's, the cross-attention keys/values) such copies
(decode.encoder_quantize), since CPUs with bfloat16 matrix units multiply the encoder's many
rows fastest that way. Otherwise the
products give the training layout's values up to float32 summation order
(tests/test_decode_weights.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx, struct

from transformer.model.quantize import int8_matmul, quantize_columns

LAYOUTS = ("auto", "in_out", "out_in", "none")  # decode.weight_layout; none: no float copies
# 'auto': out_in up to this many rows per product (measured: 32 rows gain, 128 rows lose).
AUTO_OUT_IN_MAX_ROWS = 64


@struct.dataclass
class Projection:
    """x @ W (+ b) for decoding. kernel is float [in, out] (layout 'in_out'), float [out, in]
    ('out_in') or int8 [in, out] with per-output scale [out] ('int8'); bias [out] or None."""

    kernel: jax.Array
    scale: jax.Array | None
    bias: jax.Array | None
    layout: str = struct.field(pytree_node=False)

    def __call__(self, x: jax.Array, dtype) -> jax.Array:
        if self.layout == "int8":
            y = int8_matmul(x, self.kernel, self.scale).astype(dtype)
        elif self.layout == "out_in":
            y = jnp.einsum(
                "...k,nk->...n",
                x.astype(self.kernel.dtype),
                self.kernel,
                preferred_element_type=dtype,
            )
        else:
            y = jnp.dot(x.astype(self.kernel.dtype), self.kernel, preferred_element_type=dtype)
        if self.bias is not None:
            y = y + self.bias
        return y


def projection(kernels: list[jax.Array], biases: list | None, *, layout: str, dtype, quantize: str):
    """One Projection computing [x @ k for k in kernels] side by side: kernels [in, out_i]."""
    kernel = kernels[0] if len(kernels) == 1 else jnp.concatenate(kernels, axis=1)  # [in, out]
    bias = None if biases is None else jnp.concatenate(biases).astype(dtype)
    if quantize == "int8":
        q, scale = quantize_columns(kernel)
        return Projection(q, scale, bias, "int8")
    kernel = kernel.astype(jnp.bfloat16 if quantize == "bfloat16" else dtype)
    if layout == "out_in":
        return Projection(kernel.T, None, bias, "out_in")
    return Projection(kernel, None, bias, "in_out")


def _copy_of(denses, *, layout: str, quantize: str, dtype=None) -> Projection:
    """One Projection of Dense layers side by side, computing in `dtype` (default: theirs)."""
    biases = None if denses[0].bias is None else [d.bias[...] for d in denses]
    return projection(
        [d.kernel[...] for d in denses],
        biases,
        layout=layout,
        dtype=dtype or denses[0].dtype,
        quantize=quantize,
    )


def resolve_layout(layout: str, rows: int) -> str:
    """'auto' -> 'out_in' for products of at most AUTO_OUT_IN_MAX_ROWS rows, else 'in_out'."""
    if layout != "auto":
        return layout
    return "out_in" if rows <= AUTO_OUT_IN_MAX_ROWS else "in_out"


def prepare_decoder(model, *, layout: str, quantize: str = "none") -> None:
    """Sets the decode-time copies on model (see the module docstring), in place. Call it on
    a model merged inside the jitted decode function after the cross-attention keys/values
    are computed: the cross-attention key/value layers are not used again and get none.
    layout 'none' leaves a float model as it is (int8 copies keep the 'in_out' order)."""
    from transformer.model.layers import Dense

    if layout == "none":
        if quantize == "none":
            return
        layout = "in_out"

    def of(*denses: Dense, dtype=None) -> Projection:
        return _copy_of(denses, layout=layout, quantize=quantize, dtype=dtype)

    for layer in model.decoder_layers:
        attn = layer.self_attention
        attn.decode_qkv = of(attn.query, attn.key, attn.value)
        skip = {id(layer.cross_attention.key), id(layer.cross_attention.value)}
        skip |= {id(attn.query), id(attn.key), id(attn.value)}  # run fused, above
        for _, module in nnx.iter_modules(layer):
            if isinstance(module, Dense) and id(module) not in skip:
                module.decode_projection = of(module)
    if model.output is not None:
        model.decode_output = of(model.output, dtype=jnp.float32)
        return
    table = model.target_embedding.embedding[...]  # [V, d]: already the out_in layout
    if quantize != "none" or layout == "in_out":
        model.decode_output = projection(
            [table.T], None, layout=layout, dtype=jnp.float32, quantize=quantize
        )
    else:
        model.decode_output = Projection(table, None, None, "out_in")


def prepare_encoder(model, *, quantize: str) -> None:
    """With quantize='bfloat16' (decode.encoder_quantize), bfloat16 [in, out] copies for every
    dense layer that runs once per batch: the encoder's and the cross-attention key/value
    projections. Their products have hundreds of rows, where the training layout is as fast
    as any and int8 gains nothing (benchmarks/experiments/matmul_shapes.py), so only bfloat16
    is offered."""
    from transformer.model.layers import Dense

    if quantize == "none":
        return
    modules = [m for layer in model.encoder_layers for _, m in nnx.iter_modules(layer)]
    modules += [
        d
        for layer in model.decoder_layers
        for d in (layer.cross_attention.key, layer.cross_attention.value)
    ]
    for module in modules:
        if isinstance(module, Dense):
            module.decode_projection = _copy_of([module], layout="in_out", quantize=quantize)
