"""Model concepts checked against independent facts, never against values the code produced.

* Attention equals a naive NumPy softmax(Q K^T / sqrt(D) + bias + mask) V computed here from
  the module's own parameters, under source-padding, causal, packed-segment and cross masks,
  for multi-head, grouped-query and multi-query layouts, with and without RoPE; the mask
  builders in `transformer.model.masks` equal masks written here from their definitions.
* GQA / MQA equals multi-head attention whose key/value weights repeat each key/value head
  num_heads / num_kv_heads times.
* RoPE equals the half-split rotation (x[i], x[i + D/2]) by pos * base^(-2i/D), written with
  complex numbers; rotated q.k depends only on the position offset.
* ALiBi slopes equal Press et al.'s geometric sequence (hand-derived exponents and the
  paper's rule for non-powers of two); the bias is -slope * |i - j|.
* T5 relative-position buckets equal Raffel et al.'s `_relative_position_bucket` written
  here, plus hand-derived buckets; the learned bias gathers the bucket's row.
* Packing isolation: every sentence of a packed row gets the logits and loss it gets alone.
* Dropout: zero fraction, exact 1 / keep scaling, unbiased mean and independence, all within
  binomial tolerances computed here.
* Every architecture switch changes the logits of a model with otherwise identical weights.
"""

from __future__ import annotations

import itertools
import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import fast_subset, tiny_model_config
from transformer import ModelConfig, Transformer
from transformer.common.special_ids import BOS_ID
from transformer.model import masks
from transformer.model.activations import ACTIVATIONS
from transformer.model.attention import Attention
from transformer.model.dropout import BIT_SOURCES, KeySeq, dropout, mask_width
from transformer.model.instrumentation import Instrumentation
from transformer.model.normalization import NORMS, PLACEMENTS
from transformer.model.position import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    relative_position_bucket,
)
from transformer.model.position_schemes import SCHEMES, Rotary, T5Relative
from transformer.training import steps
from transformer.training.loss import cross_entropy

VOCAB = 50
BOS = BOS_ID


def tiny(**overrides) -> ModelConfig:
    return tiny_model_config(**{"vocab_size": VOCAB, **overrides})


ROPE_BASE = ModelConfig.rope_base  # the default; the naive rotation below uses it


def rope(positions):
    """The RoPE scheme's rotation at positions [B, T] (None: no rotation)."""
    if positions is None:
        return None
    scheme = Rotary(tiny(position="rope"), causal=False, rngs=nnx.Rngs(0))
    return scheme.rotation(jnp.asarray(positions))


def assign_named_params(module: nnx.Module) -> nnx.Module:
    """Overwrites every Param with values drawn from a seed derived from its path, so two
    modules share exactly the weights of every parameter they both have (independent of the
    order the constructor drew them in), and biases and norm offsets are non-zero."""
    for path, node in nnx.iter_graph(module):
        if not isinstance(node, nnx.Param):
            continue
        shape = node[...].shape
        rng = np.random.default_rng(zlib.crc32("/".join(map(str, path)).encode()))
        noise = rng.standard_normal(shape)
        if path[-1] == "scale":
            value = 1.0 + 0.1 * noise
        elif path[-1] == "kernel":
            value = noise / math.sqrt(shape[0])
        elif path[-1] == "bias":
            value = 0.1 * noise
        else:  # embeddings, learned position tables, relative-bias tables
            value = 0.3 * noise
        node[...] = jnp.asarray(value, jnp.float32)
    return module


# ------------------------------------------------------------------------ naive references


def naive_rope(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """Half-split RoPE: z_i = x_i + i x_{i+D/2} is multiplied by exp(i pos base^(-2i/D)).

    x [B, T, H, D], positions [B, T]."""
    half = x.shape[-1] // 2
    z = x[..., :half] + 1j * x[..., half:]  # [B, T, H, D/2]
    theta = positions[:, :, None, None] * base ** (-2.0 * np.arange(half) / x.shape[-1])
    rotated = z * np.exp(1j * theta)
    return np.concatenate([rotated.real, rotated.imag], axis=-1)


def dense_np(x: np.ndarray, dense) -> np.ndarray:
    y = x @ np.asarray(dense.kernel[...], np.float64)
    if dense.bias is not None:
        y = y + np.asarray(dense.bias[...], np.float64)
    return y


def naive_attention(attn: Attention, x, y, allowed, bias=None, q_pos=None, k_pos=None):
    """Textbook attention in float64 from the module's parameters.

    x [B, T, d] queries' input, y [B, S, d] keys'/values' input, allowed bool [B, 1, T, S],
    bias [B, H, T, S]. Query head h reads key/value head h // (H / K).
    Returns (output [B, T, d], probabilities [B, H, T, S]); rows with no allowed key are NaN.
    """
    h, kv, d = attn.num_heads, attn.kv_heads, attn.head_dim
    b, t, _ = x.shape
    s = y.shape[1]
    q = dense_np(x, attn.query).reshape(b, t, h, d)
    k = dense_np(y, attn.key).reshape(b, s, kv, d)
    v = dense_np(y, attn.value).reshape(b, s, kv, d)
    if q_pos is not None:
        q, k = naive_rope(q, q_pos, ROPE_BASE), naive_rope(k, k_pos, ROPE_BASE)
    group = h // kv
    k_per_head = k[:, :, [i // group for i in range(h)]]  # [B, S, H, D]
    v_per_head = v[:, :, [i // group for i in range(h)]]
    scores = np.einsum("bthd,bshd->bhts", q, k_per_head) / math.sqrt(d)  # [B, H, T, S]
    if bias is not None:
        scores = scores + bias
    allowed = np.broadcast_to(allowed, scores.shape)
    scores = np.where(allowed, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        probs = weights / weights.sum(-1, keepdims=True)
    heads = np.einsum("bhts,bshd->bthd", probs, v_per_head).reshape(b, t, h * d)
    return dense_np(heads, attn.out), probs


# ------------------------------------------------------------------------------ attention

# Packed rows: segment ids 1, 2, 3 ..., 0 on padding.   # [B=2, T=8]
PACKED_SEGMENTS = np.array([[1, 1, 1, 2, 2, 3, 3, 0], [1, 1, 2, 2, 2, 2, 0, 0]])
PADDED_TOKENS = np.array([[5, 6, 7, 8, 9, 0, 0, 0], [4, 5, 6, 7, 8, 9, 10, 11]])


def expected_mask(kind: str) -> np.ndarray:
    """bool [B, 1, T, S] from the definitions: True = query t may attend key s."""
    t = np.arange(8)
    causal = t[None, :] <= t[:, None]  # [T, S]: s <= t
    if kind == "source_padding":
        real = PADDED_TOKENS != 0
        return np.broadcast_to(real[:, None, None, :], (2, 1, 8, 8))
    if kind == "causal":
        return np.broadcast_to(causal, (2, 1, 8, 8))
    seg = PACKED_SEGMENTS
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] != 0)  # [B, T, S]
    if kind == "packed":
        return same[:, None]
    return (same & causal)[:, None]  # packed_causal


def project_mask(kind: str) -> jax.Array:
    if kind == "source_padding":
        segments, _ = masks.default_segments(jnp.asarray(PADDED_TOKENS))
        return masks.segment_mask(segments, segments)
    if kind == "causal":
        return masks.causal_mask(8, 8)
    seg = jnp.asarray(PACKED_SEGMENTS)
    if kind == "packed":
        return masks.segment_mask(seg, seg)
    return masks.segment_mask(seg, seg) & masks.causal_mask(8, 8)


MASK_KINDS = ["source_padding", "causal", "packed", "packed_causal"]
KV_LAYOUTS = {"mha": None, "gqa": 2, "mqa": 1}


def make_attention(num_kv_heads=None, **overrides) -> Attention:
    cfg = tiny(num_kv_heads=num_kv_heads, **overrides)
    capture = Instrumentation(capture_attention=True)
    attention = Attention(cfg, out_init_scale=1.0, rngs=nnx.Rngs(0), instrumentation=capture)
    return assign_named_params(attention)


def attend_capturing(attn: Attention, x, kv, **kwargs):
    """(output [B, T, d], probabilities [B, H, T, S]) of one call, the probabilities sown."""
    out, sown = nnx.capture(attn, nnx.Intermediate)(x, kv, **kwargs)
    return out, sown["probabilities"].get_value()[0]


def compare_with_naive(attn, x, y, mask_np, bias, q_pos=None, k_pos=None):
    out, probs = attend_capturing(
        attn,
        jnp.asarray(x, jnp.float32),
        attn.project_kv(jnp.asarray(y, jnp.float32), rope(k_pos)),
        mask=jnp.asarray(mask_np),
        bias=jnp.asarray(bias, jnp.float32),
        rotate=rope(q_pos),
        keys=None,
    )
    want_out, want_probs = naive_attention(
        attn,
        x,
        y,
        mask_np,
        bias,
        None if q_pos is None else np.asarray(q_pos),
        None if k_pos is None else np.asarray(k_pos),
    )
    has_key = mask_np.any(-1)[:, 0]  # [B, T]: queries with something to attend to
    np.testing.assert_allclose(np.asarray(out)[has_key], want_out[has_key], atol=1e-5)
    probs = np.transpose(np.asarray(probs), (0, 2, 1, 3))  # [B, T, H, S]
    want_probs = np.transpose(want_probs, (0, 2, 1, 3))
    np.testing.assert_allclose(probs[has_key], want_probs[has_key], atol=1e-6)


@pytest.mark.parametrize("layout", KV_LAYOUTS)
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_self_attention_matches_naive_softmax_attention(kind, layout):
    attn = make_attention(KV_LAYOUTS[layout])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 16))  # [B, T, d]
    bias = rng.standard_normal((2, 4, 8, 8))  # [B, H, T, S]
    mask = expected_mask(kind)
    # Rows of padding queries are unconstrained (their outputs are never used).
    real = (PADDED_TOKENS != 0) if kind == "source_padding" else np.ones((2, 8), bool)
    if kind.startswith("packed"):
        real = PACKED_SEGMENTS != 0
    got_mask = np.broadcast_to(project_mask(kind), mask.shape)[:, 0]  # [B, T, S]
    np.testing.assert_array_equal(got_mask[real], mask[:, 0][real])
    compare_with_naive(attn, x, x, mask, bias)


@pytest.mark.parametrize("layout", KV_LAYOUTS)
def test_cross_attention_with_source_padding_matches_naive(layout):
    """Query length 5 != key length 7; keys 5.. of row 0 and 3.. of row 1 are padding."""
    attn = make_attention(KV_LAYOUTS[layout])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 16))  # [B, T, d] decoder states
    y = rng.standard_normal((2, 7, 16))  # [B, S, d] encoder output
    src_segments = np.array([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0]])
    tgt_segments = np.ones((2, 5), np.int64)
    mask = np.broadcast_to((src_segments != 0)[:, None, None, :], (2, 1, 5, 7))
    got_mask = masks.segment_mask(jnp.asarray(tgt_segments), jnp.asarray(src_segments))
    np.testing.assert_array_equal(got_mask, mask)
    compare_with_naive(attn, x, y, mask, np.zeros((2, 4, 5, 7)))


@pytest.mark.parametrize("layout", KV_LAYOUTS)
def test_rope_attention_matches_naive_with_rotated_q_and_k(layout):
    attn = make_attention(KV_LAYOUTS[layout], position="rope")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 8, 16))  # [B, T, d]
    positions = jnp.asarray(np.stack([np.arange(8), [0, 1, 2, 0, 1, 0, 1, 2]]), jnp.int32)
    mask = expected_mask("packed_causal")
    compare_with_naive(attn, x, x, mask, np.zeros((2, 4, 8, 8)), positions, positions)


@pytest.mark.parametrize("num_kv_heads", [2, 1], ids=["gqa", "mqa"])
def test_grouped_kv_equals_mha_with_repeated_kv_heads(num_kv_heads):
    grouped = make_attention(num_kv_heads, position="rope")
    full = make_attention(None, position="rope")
    repeat = 4 // num_kv_heads
    for name in ("query", "out"):
        for field in ("kernel", "bias"):
            getattr(getattr(full, name), field)[...] = getattr(getattr(grouped, name), field)[...]
    for name in ("key", "value"):
        src, dst = getattr(grouped, name), getattr(full, name)
        kernel = np.asarray(src.kernel[...]).reshape(16, num_kv_heads, 4)  # [d, K, D]
        dst.kernel[...] = jnp.asarray(np.repeat(kernel, repeat, axis=1).reshape(16, 16))
        bias = np.asarray(src.bias[...]).reshape(num_kv_heads, 4)  # [K, D]
        dst.bias[...] = jnp.asarray(np.repeat(bias, repeat, axis=0).reshape(16))
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((2, 6, 16)), jnp.float32)  # [B, T, d]
    positions = jnp.broadcast_to(jnp.arange(6), (2, 6))
    mask = masks.causal_mask(6, 6)
    outs = []
    for attn in (grouped, full):
        out, probs = attend_capturing(
            attn,
            x,
            attn.project_kv(x, rope(positions)),
            mask=mask,
            bias=None,
            rotate=rope(positions),
            keys=None,
        )
        outs.append((np.asarray(out), np.asarray(probs)))
    np.testing.assert_allclose(outs[0][0], outs[1][0], atol=1e-5)
    np.testing.assert_allclose(outs[0][1], outs[1][1], atol=1e-6)


# ----------------------------------------------------------------------------------- RoPE


@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_rope_matches_half_split_rotation_formula(base):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 3, 8)).astype(np.float32)  # [B, T, H, D]
    positions = rng.integers(0, 60, size=(2, 5))  # [B, T]
    got = apply_rope(jnp.asarray(x), jnp.asarray(positions, jnp.int32), base)
    want = naive_rope(x.astype(np.float64), positions, base)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)


def test_rope_query_key_dot_depends_only_on_offset():
    rng = np.random.default_rng(5)
    q = jnp.asarray(rng.standard_normal((1, 1, 2, 8)), jnp.float32)  # [B, 1, H, D]
    k = jnp.asarray(rng.standard_normal((1, 1, 2, 8)), jnp.float32)

    def score(m, n):  # [H]: rotated query at position m . rotated key at position n
        rq = apply_rope(q, jnp.array([[m]]))
        rk = apply_rope(k, jnp.array([[n]]))
        return np.asarray(jnp.sum(rq * rk, axis=-1))[0, 0]

    for m, n in [(0, 0), (3, 1), (2, 9), (7, 4)]:
        for shift in (1, 5, 40):
            np.testing.assert_allclose(score(m + shift, n + shift), score(m, n), atol=1e-4)
    # ...and it does depend on the offset (a rotation-free implementation would not).
    assert not np.allclose(score(0, 0), score(0, 1), atol=1e-3)
    assert not np.allclose(score(0, 1), score(1, 0), atol=1e-3)


# ---------------------------------------------------------------------------------- ALiBi

# log2 of the slopes, derived by hand from Press et al. (2022), Section 3 and their code.
ALIBI_LOG2_SLOPES = {
    1: [-8],
    2: [-4, -8],
    3: [-4, -8, -2],
    4: [-2, -4, -6, -8],
    6: [-2, -4, -6, -8, -1, -3],
    8: [-1, -2, -3, -4, -5, -6, -7, -8],
    12: [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5],
    16: [-0.5 * i for i in range(1, 17)],
}


def paper_alibi_slopes(n: int) -> list[float]:
    """Power of two: 2^(-8 i / n), i = 1..n. Otherwise the closest lower power of two's
    slopes, then every other slope (first, third, ...) of twice that power, until n."""
    if n & (n - 1) == 0:
        return [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]
    lower = 1 << (n.bit_length() - 1)
    upper = [2.0 ** (-8.0 * i / (2 * lower)) for i in range(1, 2 * lower + 1)]
    return paper_alibi_slopes(lower) + upper[0::2][: n - lower]


@pytest.mark.parametrize("num_heads", sorted(ALIBI_LOG2_SLOPES))
def test_alibi_slopes_match_hand_derived_table(num_heads):
    want = [2.0**e for e in ALIBI_LOG2_SLOPES[num_heads]]
    np.testing.assert_allclose(np.asarray(alibi_slopes(num_heads)), want, rtol=1e-6)


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32])
def test_alibi_slopes_match_paper_rule(num_heads):
    got = np.asarray(alibi_slopes(num_heads))
    assert got.shape == (num_heads,)
    np.testing.assert_allclose(got, paper_alibi_slopes(num_heads), rtol=1e-6)


def test_alibi_bias_is_minus_slope_times_distance():
    q_pos = np.array([[0, 1, 2, 0, 1], [4, 5, 6, 7, 8]])  # [B, Tq]
    k_pos = np.array([[0, 1, 2, 0, 1, 2], [0, 3, 6, 9, 12, 15]])  # [B, Tk]
    got = np.asarray(alibi_bias(jnp.asarray(q_pos), jnp.asarray(k_pos), 4))  # [B, H, Tq, Tk]
    slopes = np.array(paper_alibi_slopes(4))
    distance = np.abs(q_pos[:, :, None] - k_pos[:, None, :])  # [B, Tq, Tk]
    want = -slopes[None, :, None, None] * distance[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ------------------------------------------------------------------------------ T5 buckets


def t5_bucket(relative_position: int, bidirectional: bool, num_buckets: int, max_distance: int):
    """Raffel et al.'s _relative_position_bucket for one key_pos - query_pos, in float32 as in
    the reference (mesh_tensorflow / T5) implementation."""
    bucket = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            bucket += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    log_ratio = np.log(np.float32(n) / np.float32(max_exact)) / np.float32(
        math.log(max_distance / max_exact)
    )
    large = max_exact + int(np.float32(log_ratio) * np.float32(num_buckets - max_exact))
    return bucket + min(large, num_buckets - 1)


T5_SETTINGS = [(True, 32, 128), (False, 32, 128), (True, 16, 64), (False, 8, 20)]


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", T5_SETTINGS)
def test_t5_buckets_match_reference_function(bidirectional, num_buckets, max_distance):
    distances = np.arange(-300, 301)
    got = np.asarray(
        relative_position_bucket(
            jnp.asarray(distances, jnp.int32),
            bidirectional=bidirectional,
            num_buckets=num_buckets,
            max_distance=max_distance,
        )
    )
    want = [t5_bucket(int(r), bidirectional, num_buckets, max_distance) for r in distances]
    np.testing.assert_array_equal(got, want)
    assert got.min() >= 0 and got.max() == num_buckets - 1


# (key_pos - query_pos, bucket) derived by hand for num_buckets=32, max_distance=128.
T5_HAND = {
    True: [
        (0, 0),
        (-1, 1),
        (-7, 7),
        (-8, 8),
        (-15, 9),
        (-20, 10),
        (-127, 15),
        (-300, 15),
        (1, 17),
        (7, 23),
        (8, 24),
        (20, 26),
        (300, 31),
    ],
    False: [
        (0, 0),
        (5, 0),
        (300, 0),
        (-1, 1),
        (-15, 15),
        (-16, 16),
        (-20, 17),
        (-32, 21),
        (-64, 26),
        (-100, 30),
        (-128, 31),
        (-1000, 31),
    ],
}


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_match_hand_derived_values(bidirectional):
    rel, want = zip(*T5_HAND[bidirectional], strict=True)
    got = relative_position_bucket(
        jnp.asarray(rel, jnp.int32), bidirectional=bidirectional, num_buckets=32, max_distance=128
    )
    np.testing.assert_array_equal(np.asarray(got), want)


def test_relative_bias_gathers_bucket_row_per_head():
    cfg = tiny(num_heads=3, d_model=12, relative_buckets=8, relative_max_distance=20)
    module = assign_named_params(T5Relative(cfg, causal=False, rngs=nnx.Rngs(0)))
    table = np.asarray(module.embedding[...])  # [buckets, H]
    q_pos = np.array([[0, 1, 2, 3], [0, 10, 20, 30]])  # [B, Tq]
    k_pos = np.array([[0, 1, 2, 3, 4], [5, 0, 40, 25, 1]])  # [B, Tk]
    got = np.asarray(module.bias(jnp.asarray(q_pos), jnp.asarray(k_pos)))  # [B, H, Tq, Tk]
    for b, i, j in itertools.product(range(2), range(4), range(5)):
        bucket = t5_bucket(int(k_pos[b, j] - q_pos[b, i]), True, 8, 20)
        np.testing.assert_allclose(got[b, :, i, j], table[bucket], rtol=1e-6)


# --------------------------------------------------------------------------------- packing

# Three sentence pairs (source tokens, target tokens ending in EOS = 3).
SENTENCES = [
    ([5, 6, 7], [11, 12, 13, 3]),
    ([8, 9, 10, 11, 12], [14, 3]),
    ([13, 14], [15, 16, 3]),
]
PAD = 2  # trailing padding of the packed row


def packed_row(sentences, length, side):
    """(tokens, segments 1.., positions restarting at 0) [1, length] for one side (0/1)."""
    tokens, segments, positions = [], [], []
    for seg, pair in enumerate(sentences, start=1):
        tokens += pair[side]
        segments += [seg] * len(pair[side])
        positions += list(range(len(pair[side])))
    fill = length - len(tokens)
    return [np.array([a + [0] * fill]) for a in (tokens, segments, positions)]


def make_batch(rows):
    """rows: per row, a list of sentence pairs -> the model batch dict [B, S] / [B, T]."""
    s_len = sum(len(p[0]) for p in SENTENCES) + PAD
    t_len = sum(len(p[1]) for p in SENTENCES) + PAD
    batch = {}
    for side, (name, length) in enumerate((("src", s_len), ("tgt", t_len))):
        parts = [packed_row(row, length, side) for row in rows]
        for i, key in enumerate((name, f"{name}_segments", f"{name}_positions")):
            batch[key] = jnp.asarray(np.concatenate([p[i] for p in parts]), jnp.int32)
    return batch


def nll_np(logits: np.ndarray, targets) -> float:
    """Summed -log softmax(logits)[target] over the tokens of one sentence, in float64."""
    logits = logits.astype(np.float64)
    top = logits.max(-1)
    lse = top + np.log(np.exp(logits - top[:, None]).sum(-1))
    return float(np.sum(lse - logits[np.arange(len(targets)), targets]))


def test_shift_right_restarts_at_every_segment():
    batch = make_batch([SENTENCES])
    want = []
    for _, tgt in SENTENCES:
        want += [BOS] + tgt[:-1]
    want += [0] * PAD
    got = masks.shift_right(batch["tgt"], batch["tgt_segments"], BOS)
    np.testing.assert_array_equal(np.asarray(got), [want])


def packed_and_alone_batch():
    """Row 0 packs the three sentences; rows 1-3 hold one sentence each.  # [4, S] / [4, T]"""
    return make_batch([SENTENCES] + [[pair] for pair in SENTENCES])


PACKING_FAST = [("rope", "pre"), ("relative", "post")]


@pytest.mark.parametrize(
    "position,norm_position",
    fast_subset(itertools.product(SCHEMES.names(), PLACEMENTS.names()), PACKING_FAST),
)
def test_packed_sentences_get_their_own_logits_and_loss(position, norm_position):
    cfg = tiny(
        position=position, norm_position=norm_position, num_encoder_layers=2, num_decoder_layers=2
    )
    model = assign_named_params(Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, params = nnx.split(model, nnx.Param)
    batch = packed_and_alone_batch()
    logits = np.asarray(steps._forward(graphdef, params, batch, jax.random.key(0), train=False))
    start, total_nll = 0, 0.0
    for i, (_, tgt) in enumerate(SENTENCES):
        packed = logits[0, start : start + len(tgt)]  # [len, V]
        alone = logits[1 + i, : len(tgt)]
        np.testing.assert_allclose(packed, alone, atol=1e-5)
        nll = nll_np(packed, tgt)
        assert nll == pytest.approx(nll_np(alone, tgt), rel=1e-5)
        total_nll += nll
        start += len(tgt)
    for rows in (slice(0, 1), slice(1, 4)):  # the packed row, then the three single rows
        weights = batch["tgt_segments"][rows] != 0
        _, nll = cross_entropy(jnp.asarray(logits[rows]), batch["tgt"][rows], weights, 0.0)
        assert float(nll) == pytest.approx(total_nll, rel=1e-5)


# --------------------------------------------------------------------------------- dropout

N_DROP = 1 << 20


def dropout_input() -> jax.Array:
    return jax.random.uniform(jax.random.key(0), (1024, N_DROP // 1024), minval=0.5, maxval=2.0)


SOURCES = sorted(BIT_SOURCES)  # every registered dropout bit source


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("rate", [0.001, 1 / 256, 0.1, 0.25, 0.5, 0.9])
def test_dropout_zero_fraction_scaling_and_mean(rate, source):
    """The drop fraction is the configured rate itself, the kept elements are scaled by
    1 / (1 - rate) and the mean is preserved (five binomial standard errors), whichever
    source draws the bits."""
    x = np.asarray(dropout_input())  # [1024, 1024], no zeros
    keys = KeySeq(jax.random.key(1), BIT_SOURCES[source])
    y = np.asarray(dropout(jnp.asarray(x), rate, keys))
    dropped = y == 0
    sigma = math.sqrt(rate * (1 - rate) / N_DROP)
    assert abs(dropped.mean() - rate) < 5 * sigma
    np.testing.assert_allclose(y[~dropped], x[~dropped] / (1 - rate), rtol=3e-7)
    mean_sigma = math.sqrt(np.mean(x**2) * rate / (1 - rate) / N_DROP)
    assert abs(y.mean() - x.mean()) < 5 * mean_sigma


@pytest.mark.parametrize("rate", [1 / 256, 0.1, 0.001, 0.3, 0.999, 0.25, 26 / 256, 1e-9])
def test_dropout_threshold_represents_the_rate(rate):
    """The drop probability the mask implements, threshold / 2^bits, is the rate: exactly on
    the 8-bit path, within 2^-33 on the 32-bit one."""
    bits, threshold = mask_width(rate)
    assert bits == (8 if (rate * 256).is_integer() else 32)
    assert abs(threshold / 2**bits - rate) <= 2.0**-33


def test_a_rate_too_small_to_represent_is_refused():
    with pytest.raises(ValueError, match=r"dropout_rate=1e-12 is below 2.33e-10"):
        tiny(dropout_rate=1e-12)
    with pytest.raises(ValueError, match="attention_dropout_rate must be in"):
        tiny(attention_dropout_rate=1.0)
    assert tiny(dropout_rate=1e-9).dropout_rate == 1e-9


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("rate", [0.25, 0.5, 0.1])
def test_dropout_mask_is_uniform_and_independent_across_elements(rate, source):
    """Each byte slot of a random word (element index mod 4) and each half of the array drops
    at the rate, and neighbours drop jointly at rate^2 (no repeated or shared random bits);
    0.1 takes the 32-bit path, the others the 8-bit one."""
    keys = KeySeq(jax.random.key(2), BIT_SOURCES[source])
    flat = np.asarray(dropout(jnp.ones(N_DROP), rate, keys)) == 0
    for part in [flat[i::4] for i in range(4)] + [flat[: N_DROP // 2], flat[N_DROP // 2 :]]:
        assert abs(part.mean() - rate) < 5 * math.sqrt(rate * (1 - rate) / part.size)
    for lag in (1, 4, 512):
        both = flat[:-lag] & flat[lag:]
        q = rate * rate
        assert abs(both.mean() - q) < 5 * math.sqrt(q * (1 - q) / both.size)


@pytest.mark.parametrize("source", SOURCES)
def test_dropout_keys_give_fresh_masks_and_are_reproducible(source):
    x = jnp.ones(4096)
    keys = KeySeq(jax.random.key(3), BIT_SOURCES[source])
    first, second = dropout(x, 0.5, keys), dropout(x, 0.5, keys)
    assert not np.array_equal(first, second)  # each site draws its own mask
    again = KeySeq(jax.random.key(3), BIT_SOURCES[source])
    np.testing.assert_array_equal(dropout(x, 0.5, again), first)
    np.testing.assert_array_equal(dropout(x, 0.5, again), second)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("rate", [0.25, 0.1])
def test_dropout_sites_drop_independently(rate, source):
    """Two sites of one key sequence, and the same site under two step keys, drop the same
    element jointly at rate^2: their bits share nothing (a source that ignored the site's
    key, or kept a generator state between sites, fails this)."""
    ones = jnp.ones(N_DROP)
    keys = KeySeq(jax.random.key(5), BIT_SOURCES[source])
    site_1, site_2 = (np.asarray(dropout(ones, rate, keys)) == 0 for _ in range(2))
    other_step = KeySeq(jax.random.fold_in(jax.random.key(5), 1), BIT_SOURCES[source])
    next_step = np.asarray(dropout(ones, rate, other_step)) == 0
    q = rate * rate
    for a, b in ((site_1, site_2), (site_1, next_step)):
        assert abs((a & b).mean() - q) < 5 * math.sqrt(q * (1 - q) / N_DROP)


def test_dropout_bit_sources_draw_different_masks_at_the_same_rate():
    """Philox's masks are not threefry's in disguise: one key gives two unrelated masks."""
    ones = jnp.ones(N_DROP)
    masks_ = [
        np.asarray(dropout(ones, 0.5, KeySeq(jax.random.key(6), BIT_SOURCES[s]))) == 0
        for s in ("threefry", "philox")
    ]
    assert abs((masks_[0] & masks_[1]).mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / N_DROP)


def test_dropout_rate_zero_or_no_keys_is_identity():
    x = dropout_input()
    np.testing.assert_array_equal(dropout(x, 0.0, KeySeq(jax.random.key(4))), x)
    np.testing.assert_array_equal(dropout(x, 0.5, None), x)


# --------------------------------------------------------------------------------- switches

BASELINE = dict(activation="relu", norm_position="post", position="sinusoidal")


def forward(model) -> np.ndarray:
    graphdef, params = nnx.split(model, nnx.Param)
    batch = packed_and_alone_batch()
    return np.asarray(steps._forward(graphdef, params, batch, jax.random.key(0), train=False))


def switched_logits(**overrides) -> np.ndarray:
    """Logits [4, T, V] of the baseline with `overrides`; every parameter shared with the
    baseline has the baseline's weights, so only the switch itself can change the output."""
    cfg = tiny(**{**BASELINE, **overrides})
    return forward(assign_named_params(Transformer(cfg, rngs=nnx.Rngs(0))))


def test_baseline_build_is_deterministic_for_one_seed():
    a = Transformer(tiny(**BASELINE), rngs=nnx.Rngs(0))
    b = Transformer(tiny(**BASELINE), rngs=nnx.Rngs(0))
    for x, y in zip(jax.tree.leaves(nnx.state(a)), jax.tree.leaves(nnx.state(b)), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(forward(a), forward(b))
    c = Transformer(tiny(**BASELINE), rngs=nnx.Rngs(1))
    assert not np.allclose(forward(a), forward(c), atol=1e-3)  # the seed matters
    np.testing.assert_array_equal(switched_logits(), switched_logits())


def test_every_activation_gives_distinct_logits():
    logits = {name: switched_logits(activation=name) for name in ACTIVATIONS.names()}
    for a, b in itertools.combinations(ACTIVATIONS.names(), 2):
        assert np.abs(logits[a] - logits[b]).max() > 1e-6, f"{a} and {b} give the same logits"


def test_output_bias_adds_its_vector_to_every_logit():
    model = assign_named_params(Transformer(tiny(**BASELINE, output_bias=True), rngs=nnx.Rngs(0)))
    bias = np.asarray(model.output_bias[...])
    np.testing.assert_allclose(forward(model), switched_logits() + bias, atol=1e-5, rtol=0)


SWITCHES = (
    [dict(norm_position=p) for p in PLACEMENTS.names() if p != BASELINE["norm_position"]]
    + [dict(norm_type=n) for n in NORMS.names() if n != ModelConfig.norm_type]
    + [dict(position=p) for p in SCHEMES.names() if p != BASELINE["position"]]
    + [dict(num_kv_heads=2), dict(num_kv_heads=1), dict(use_bias=False)]
    + [dict(tie_output=False), dict(share_embeddings=False), dict(output_bias=True)]
)


@pytest.mark.parametrize(
    "switch", SWITCHES, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items())
)
def test_each_switch_changes_logits(switch):
    baseline, changed = switched_logits(), switched_logits(**switch)
    assert changed.shape == baseline.shape and np.isfinite(changed).all()
    assert np.abs(changed - baseline).max() > 1e-6, f"{switch} left the logits unchanged"
