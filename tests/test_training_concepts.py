"""Training concepts checked against facts that do not come from the code under test.

- `masks.shift_right` against a naive per-position Python loop over packed rows.
- Each learning-rate schedule against its closed form (linear warmup, then rsqrt / cosine /
  constant as optim.py's docstring defines them), written out here.
- AdamW weight decay: which parameters move under zero gradients (by name: kernels and
  embedding/position tables decay, biases and norm scales do not) and by how much
  (decoupled decay: p <- p - lr * wd * p).
- `flops.forward_flops` against two counts made without it: the matmul FLOPs of every
  `dot_general` in the traced forward pass (exact), and XLA's `cost_analysis()` of the
  compiled forward pass (within a stated band).
- Scheduled sampling: rate 0 gives the teacher-forced loss and gradients (computed here from
  the model and a hand-written NLL); rate 1 feeds the model's own argmax, shifted right per
  segment with BOS at each segment start, and trains on exactly those inputs.
- Checkpoint averaging: `restore_run(average_last=N)` is the elementwise mean of the last N
  checkpoints as read by Orbax directly.
- decode.py's `index<TAB>score<TAB>text` format with n_best / num_samples > 1.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tests import helpers
from tests.helpers import run, tiny_config
from tests.shared_runs import CHECKPOINTED_RUN
from transformer import ModelConfig, Transformer
from transformer.common.special_ids import BOS_ID
from transformer.model.flops import forward_flops
from transformer.model.masks import shift_right
from transformer.training import steps as steps_lib
from transformer.training.checkpoint import _leaf_name
from transformer.training.optim import SCHEDULES, learning_rate_schedule, make_optimizer

BOS = BOS_ID


def tiny_model_config(**overrides) -> ModelConfig:
    return helpers.tiny_model_config(**{"num_heads": 2, "max_len": 32, **overrides})


def abstract_model(cfg: ModelConfig):
    """(graphdef, parameter shapes): the model built without allocating or compiling."""
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))), nnx.Param)


def random_params(shapes, seed: int, std: float = 0.3):
    """Parameters drawn in NumPy (every leaf nonzero; no per-op compiles of an init)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(rng.normal(0.0, std, x.shape), x.dtype), shapes)


def leaf_name(path) -> str:
    """'decoder_layers.0.ffn.wi.kernel' for an nnx.State, a pure dict or an Orbax tree."""
    return ".".join(p for p in _leaf_name(path).split(".") if p != "value")


def flat(tree) -> dict[str, np.ndarray]:
    return {leaf_name(p): np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(tree)}


# ----------------------------------------------------------------------- 1. shift_right


def naive_shift_right(targets, segments, bos):
    """Position t of a real token gets BOS if it starts its segment, else targets[t - 1]."""
    out = np.zeros_like(targets)
    for r in range(targets.shape[0]):
        for t in range(targets.shape[1]):
            if segments is None:  # one sentence per row, padding (0) at the end
                real, starts = targets[r, t] != 0, t == 0
            else:
                real = segments[r, t] != 0
                starts = t == 0 or segments[r, t - 1] != segments[r, t]
            if real:
                out[r, t] = bos if starts else targets[r, t - 1]
    return out


def random_packed_rows(rng, rows, width, vocab=50):
    """Rows of consecutive segments 1, 2, ... (lengths 1-4) then padding; row 0 holds
    length-1 segments, row 1 has no padding, row 2 is all padding."""
    tokens = np.zeros((rows, width), np.int32)
    segments = np.zeros((rows, width), np.int32)
    for r in range(rows):
        if r == 2:
            continue
        fill = width if r == 1 else int(rng.integers(1, width + 1))
        t, seg = 0, 0
        while t < fill:
            length = 1 if r == 0 and seg < 2 else int(rng.integers(1, 5))
            length = min(length, fill - t)
            seg += 1
            segments[r, t : t + length] = seg
            tokens[r, t : t + length] = rng.integers(3, vocab, length)
            t += length
    return tokens, segments


def test_shift_right_restarts_at_every_segment_like_a_naive_loop():
    rng = np.random.default_rng(0)
    for _ in range(5):
        tokens, segments = random_packed_rows(rng, rows=6, width=13)
        got = shift_right(jnp.asarray(tokens), jnp.asarray(segments), BOS)
        np.testing.assert_array_equal(np.asarray(got), naive_shift_right(tokens, segments, BOS))
    # The length-1 segments of row 0 are BOS alone: their token never leaks forward.
    assert np.asarray(got)[0, 0] == BOS and np.asarray(got)[0, 1] == BOS


def test_shift_right_without_segments_treats_each_row_as_one_sentence():
    rng = np.random.default_rng(1)
    tokens = np.zeros((5, 9), np.int32)
    for r, length in enumerate([9, 1, 4, 0, 7]):
        tokens[r, :length] = rng.integers(3, 50, length)
    got = shift_right(jnp.asarray(tokens), None, BOS)
    np.testing.assert_array_equal(np.asarray(got), naive_shift_right(tokens, None, BOS))


# ------------------------------------------------------------------ 2. learning rate


def closed_form_lr(schedule, step, peak, warmup, num_steps):
    """optim.py's documented schedules. The update at step k (0-based) is update number
    s = k + 1 ("the update at step 0 uses lr(1)"): warmup ramps peak * s / warmup and reaches
    the peak at update `warmup`; without warmup the first update already uses the peak."""
    s = step + 1
    ramp = min(1.0, s / warmup) if warmup else 1.0
    if schedule == "constant":
        return peak * ramp
    if schedule == "rsqrt":  # the 2017 paper: d^-0.5 * min(s^-0.5, s * warmup^-1.5), scaled
        w = max(warmup, 1)
        return peak * (s / w if s < w else math.sqrt(w / s))
    assert schedule == "cosine"  # half a cosine from the peak at `warmup` to 0 at num_steps
    progress = min(max((s - warmup) / (num_steps - warmup), 0.0), 1.0)
    return peak * ramp * 0.5 * (1.0 + math.cos(math.pi * progress))


@pytest.mark.parametrize("warmup", [8, 0], ids=["warmup8", "nowarmup"])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_schedule_matches_its_closed_form(schedule, warmup):
    peak, num_steps = 2e-3, 40
    lr = learning_rate_schedule(peak, schedule, warmup, num_steps)
    # step 0, mid-warmup, the warmup boundary (update 8 = step 7) and either side of it,
    # the middle, the last step (39) and past the end.
    for step in [0, 1, 3, 6, 7, 8, 9, 20, 30, 38, 39, 40, 60]:
        want = closed_form_lr(schedule, step, peak, warmup, num_steps)
        got = float(lr(jnp.int32(step)))
        # abs: float32 cancellation in 1 + cos(x) near x = pi (the end of cosine) costs
        # ~1e-7 of the peak; rel: float32 elsewhere.
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6 * peak), (schedule, warmup, step)


def test_schedules_peak_at_the_end_of_warmup_and_cosine_ends_at_zero():
    # The shape facts alone, independent of the exact formula above.
    peak, warmup, num_steps = 1e-3, 10, 50
    for schedule in SCHEDULES:
        lr = learning_rate_schedule(peak, schedule, warmup, num_steps)
        values = [float(lr(jnp.int32(k))) for k in range(num_steps)]
        assert max(values) == pytest.approx(peak, rel=1e-6), schedule
        assert values[warmup - 1] == pytest.approx(peak, rel=1e-6), schedule
        assert all(a < b for a, b in zip(values[:warmup], values[1:warmup], strict=False))
        assert values[0] == pytest.approx(peak / warmup, rel=1e-6), schedule
    cosine = learning_rate_schedule(peak, "cosine", warmup, num_steps)
    assert float(cosine(jnp.int32(num_steps - 1))) == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------------- 3. weight decay


DECAYED = ("kernel", "embedding", "table")  # matrices and tables
NOT_DECAYED = ("bias", "scale")  # biases and norm scales


def test_weight_decay_moves_exactly_matrices_by_lr_times_wd():
    # Every kind of parameter the model has: untied output, separate embeddings, learned
    # positions, LayerNorm (scale and bias), biased projections.
    cfg = tiny_model_config(
        tie_output=False,
        share_embeddings=False,
        position="learned",
        norm_type="layernorm",
        use_bias=True,
    )
    # Random nonzero values everywhere (LayerNorm starts at scale 1 / bias 0): "did not
    # move" is then a real observation, as decay of a zero is zero.
    params = random_params(abstract_model(cfg)[1], seed=0)
    lr, wd = 0.01, 0.1
    train = tiny_config(
        train__schedule="constant",
        train__warmup_steps=0,
        train__learning_rate=lr,
        train__weight_decay=wd,
    ).train
    optimizer, _ = make_optimizer(train)
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = jax.jit(optimizer.update)(zeros, optimizer.init(params), params)
    before, after = flat(params), flat(optax.apply_updates(params, updates))
    kinds = {name: name.split(".")[-1] for name in before}
    assert set(kinds.values()) <= set(DECAYED + NOT_DECAYED), sorted(set(kinds.values()))
    assert {"kernel", "embedding", "bias", "scale"} <= set(kinds.values())
    for name, kind in kinds.items():
        if kind in DECAYED:  # AdamW's decoupled decay: Adam's step is 0 for zero gradients
            np.testing.assert_allclose(
                after[name], before[name] * (1 - lr * wd), rtol=1e-6, err_msg=name
            )
        else:
            np.testing.assert_array_equal(after[name], before[name], err_msg=name)


# ------------------------------------------------------------------------------ 4. FLOPs


def dot_flops(jaxpr) -> int:
    """2 * (output elements) * (contracted size) summed over every dot_general, sub-jaxprs
    (jit, custom_vjp, ...) included: the matmul FLOPs the program really performs."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            out = eqn.outvars[0].aval.shape
            total += 2 * math.prod(out) * math.prod(lhs[i] for i in lhs_contract)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += dot_flops(inner)
    return total


FLOP_CONFIGS = {
    "mha": dict(),
    "gqa": dict(num_kv_heads=2),
    "gated": dict(activation="swiglu"),
    "untied": dict(tie_output=False, share_embeddings=False),
}


@pytest.mark.parametrize("name", list(FLOP_CONFIGS))
def test_forward_flops_matches_the_program_and_xla(name):
    # Unequal source/target lengths and layer counts, so swapping them changes the count.
    cfg = ModelConfig(
        vocab_size=64,
        d_model=32,
        num_heads=4,
        d_ff=128,
        num_encoder_layers=2,
        num_decoder_layers=1,
        max_len=32,
        dropout_rate=0.0,
        **FLOP_CONFIGS[name],
    )
    graphdef, params = abstract_model(cfg)  # shapes are all tracing and compiling need
    b, s, t = 2, 12, 10
    src, tgt = jax.ShapeDtypeStruct((b, s), jnp.int32), jax.ShapeDtypeStruct((b, t), jnp.int32)

    def forward(params, src, tgt):
        return nnx.merge(graphdef, params)(src, tgt)

    claimed = forward_flops(cfg, b, s, t)
    # forward_flops counts matmuls only (its docstring), so it must equal the traced
    # program's matmul FLOPs exactly.
    assert claimed == dot_flops(jax.make_jaxpr(forward)(params, src, tgt).jaxpr)

    cost = jax.jit(forward).lower(params, src, tgt).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # older JAX: a list of dicts
    # XLA counts a multiply-add as 2 FLOPs too, plus the elementwise work forward_flops leaves
    # out (softmax, LayerNorm, residual and bias adds, ReLU, masking: ~10-20 FLOPs per
    # activation element against ~2 * d_model per matmul output element); at d_model 32 that
    # measures 9-12% on top. So XLA / claimed must lie in [1, 1.3]: counting multiply-adds
    # once (ratio ~2.2) or twice over (~0.55) fails.
    ratio = cost["flops"] / claimed
    assert 1.0 <= ratio <= 1.3, ratio


# ----------------------------------------------------------------- 5. scheduled sampling


def packed_batch():
    """Two packed rows: several sentences per row, a one-token sentence, padding."""
    src_seg = np.array([[1, 1, 1, 2, 2, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 2, 2, 2, 2, 0]])
    tgt_seg = np.array([[1, 1, 2, 2, 2, 3, 0, 0, 0], [1, 1, 1, 1, 2, 2, 2, 2, 2]])
    rng = np.random.default_rng(3)
    batch = {}
    for side, seg in (("src", src_seg), ("tgt", tgt_seg)):
        # Real tokens avoid ids 0-2 (pad, unk, bos), as tokenized text does.
        tokens = np.where(seg != 0, rng.integers(3, 40, seg.shape), 0)
        positions = np.zeros_like(seg)
        for r in range(seg.shape[0]):
            for i in range(1, seg.shape[1]):
                positions[r, i] = positions[r, i - 1] + 1 if seg[r, i] == seg[r, i - 1] else 0
        batch[side] = tokens
        batch[f"{side}_segments"] = seg
        batch[f"{side}_positions"] = positions
    return {k: jnp.asarray(v, jnp.int32) for k, v in batch.items()}


def model_kwargs(batch):
    keys = ("src_segments", "tgt_segments", "src_positions", "tgt_positions")
    return {k: batch[k] for k in keys}


def teacher_inputs(batch) -> np.ndarray:
    return naive_shift_right(np.asarray(batch["tgt"]), np.asarray(batch["tgt_segments"]), BOS)


def naive_mean_nll(graphdef, params, batch, tgt_in):
    """Mean NLL over real target tokens of the model fed tgt_in (no label smoothing)."""
    logits = nnx.merge(graphdef, params)(batch["src"], tgt_in, **model_kwargs(batch))
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, batch["tgt"][..., None], -1)[..., 0]
    weights = (batch["tgt_segments"] != 0).astype(jnp.float32)
    return jnp.sum(nll * weights) / jnp.sum(weights)


def grad_recorder() -> optax.GradientTransformation:
    """An 'optimizer' whose state is the last gradient it saw (and which changes nothing)."""

    def update(grads, state, params=None):
        return jax.tree.map(jnp.zeros_like, grads), grads

    return optax.GradientTransformation(lambda p: jax.tree.map(jnp.zeros_like, p), update)


class ScheduledSamplingModel:
    """A tiny random model and the jitted functions the scheduled-sampling tests call (one
    compile each, instead of op-by-op dispatch)."""

    def __init__(self):
        # No encoder layers (the decoder still cross-attends to the source embeddings): the
        # concept lives in the decoder inputs, and half a model compiles in half the time.
        cfg = tiny_model_config(num_encoder_layers=0)
        self.graphdef, _ = abstract_model(cfg)
        # The real initialisation plus noise: a model whose argmax varies from position to
        # position and differs from its input (fresh init mostly copies the input token; pure
        # noise predicts one token everywhere), so feeding it unshifted or teacher tokens shows.
        init = jax.jit(lambda: nnx.state(Transformer(cfg, rngs=nnx.Rngs(5)), nnx.Param))()
        noise = random_params(init, seed=5)
        self.params = jax.tree.map(jnp.add, init, noise)
        self.batch = packed_batch()
        graphdef = self.graphdef

        def forward(params, batch, tgt_in):
            return nnx.merge(graphdef, params)(batch["src"], tgt_in, **model_kwargs(batch))

        def scheduled(params, batch, tgt_in, key, rate):
            model = nnx.merge(graphdef, params)
            return steps_lib._scheduled_inputs(model, batch, tgt_in, key, rate, model_kwargs(batch))

        self.forward = jax.jit(forward)
        self.scheduled = jax.jit(scheduled)
        self.naive_loss_and_grads = jax.jit(
            jax.value_and_grad(lambda p, b, x: naive_mean_nll(graphdef, p, b, x))
        )

    def predicted_inputs(self) -> np.ndarray:
        """Rate 1: the teacher-forced pass's argmax, shifted right per segment, BOS at each
        segment start, 0 on padding."""
        logits = self.forward(self.params, self.batch, jnp.asarray(teacher_inputs(self.batch)))
        predicted = np.asarray(jnp.argmax(logits, -1))
        return naive_shift_right(predicted, np.asarray(self.batch["tgt_segments"]), BOS)

    def train_step(self, rate):
        """(loss, mean gradients) of one train step with scheduled_sampling_rate=rate."""
        train = tiny_config(train__scheduled_sampling_rate=rate, train__label_smoothing=0.0)
        step = steps_lib.make_train_step(self.graphdef, grad_recorder(), lambda s: 0.0, train.train)
        recorder = grad_recorder()
        state = steps_lib.TrainState(
            jnp.zeros((), jnp.int32), self.params, recorder.init(self.params)
        )
        new_state, metrics = jax.jit(step)(state, self.batch, jax.random.key(0))
        return float(metrics["loss"]), new_state.opt_state


@pytest.fixture(scope="module")
def ss():
    return ScheduledSamplingModel()


def assert_same_grads(got, want):
    want = flat(want)
    for name, g in flat(got).items():
        np.testing.assert_allclose(g, want[name], rtol=1e-4, atol=1e-7, err_msg=name)


def test_scheduled_inputs_at_rate_one_are_the_models_shifted_argmax(ss):
    teacher_in = teacher_inputs(ss.batch)
    want = ss.predicted_inputs()
    got = ss.scheduled(ss.params, ss.batch, jnp.asarray(teacher_in), jax.random.key(1), 1.0)
    np.testing.assert_array_equal(np.asarray(got), want)
    # Not vacuous: the predictions differ from the teacher's inputs and from one position to
    # the next, so a missing or wrong shift would show.
    inner = np.asarray(ss.batch["tgt_segments"]) != 0
    inner[:, 0] = False
    inner &= teacher_in != BOS
    assert (want != teacher_in)[inner].mean() > 0.5
    assert np.any((want[:, 1:] != want[:, :-1])[inner[:, 1:]])


def test_scheduled_inputs_mix_teacher_and_model_tokens_between_rates(ss):
    teacher_in, predicted_in = teacher_inputs(ss.batch), ss.predicted_inputs()
    got = ss.scheduled(ss.params, ss.batch, jnp.asarray(teacher_in), jax.random.key(2), 0.5)
    got = np.asarray(got)
    # Each input is the teacher's or the model's token; BOS and padding are never replaced.
    assert np.all((got == teacher_in) | (got == predicted_in))
    fixed = (teacher_in == BOS) | (np.asarray(ss.batch["tgt_segments"]) == 0)
    np.testing.assert_array_equal(got[fixed], teacher_in[fixed])
    differ = predicted_in != teacher_in
    assert np.any(got[differ] == teacher_in[differ]) and np.any(got[differ] == predicted_in[differ])


def test_rate_zero_train_step_is_exactly_teacher_forcing(ss):
    want_loss, want_grads = ss.naive_loss_and_grads(
        ss.params, ss.batch, jnp.asarray(teacher_inputs(ss.batch))
    )
    loss, grads = ss.train_step(0.0)
    assert loss == pytest.approx(float(want_loss), rel=1e-5)
    assert_same_grads(grads, want_grads)


def test_rate_one_train_step_trains_on_the_models_own_inputs(ss):
    predicted_in = ss.predicted_inputs()
    want_loss, want_grads = ss.naive_loss_and_grads(ss.params, ss.batch, jnp.asarray(predicted_in))
    teacher_loss, _ = ss.naive_loss_and_grads(
        ss.params, ss.batch, jnp.asarray(teacher_inputs(ss.batch))
    )
    assert float(want_loss) != pytest.approx(float(teacher_loss), rel=1e-3)  # inputs differ
    loss, grads = ss.train_step(1.0)
    assert loss == pytest.approx(float(want_loss), rel=1e-5)
    assert_same_grads(grads, want_grads)


# ------------------------------------------------------- 6-7. a trained run (subprocess)


@pytest.fixture
def trained_run(checkpointed_run):
    """train.py on configs/default.py made tiny: checkpoints at steps 10 and 20."""
    return checkpointed_run[0]


def orbax_params(workdir, step) -> dict[str, np.ndarray]:
    """One checkpoint's parameters read by Orbax alone (no template, no project code)."""
    import orbax.checkpoint as ocp

    path = os.path.join(workdir, "checkpoints", str(step), "state")
    return flat(ocp.StandardCheckpointer().restore(path)["params"])


@pytest.mark.slow
def test_average_last_is_the_mean_of_the_last_checkpoints(trained_run, tmp_path):
    from tests.test_bad_inputs import copy_run
    from transformer.evaluation.restore import restore_run
    from transformer.training.loop import train_and_evaluate

    # A third checkpoint (step 30), so averages of three, and of two ending before the newest,
    # differ from every other choice.
    trained_run = copy_run(trained_run, tmp_path)
    train_and_evaluate(tiny_config(**{**CHECKPOINTED_RUN, "train__num_steps": 30}), trained_run)
    steps = sorted(
        int(d) for d in os.listdir(os.path.join(trained_run, "checkpoints")) if d.isdigit()
    )
    assert steps == [10, 20, 30]
    stored = {s: orbax_params(trained_run, s) for s in steps}
    assert not np.allclose(stored[10]["src_embed.embedding"], stored[20]["src_embed.embedding"])

    def mean_of(chosen):
        return {
            n: np.mean([stored[s][n].astype(np.float64) for s in chosen], axis=0)
            for n in stored[steps[0]]
        }

    cases = [("latest", 1, [30]), (10, 1, [10]), ("latest", 3, [10, 20, 30]), (20, 2, [10, 20])]
    for checkpoint, n, chosen in cases:
        restored = restore_run(trained_run, checkpoint=str(checkpoint), average_last=n)
        assert restored.step == chosen[-1] and list(restored.averaged_steps) == chosen
        got, want = flat(restored.params), mean_of(chosen)
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_allclose(
                got[name], want[name], rtol=1e-6, atol=1e-7, err_msg=f"{checkpoint}/{n}: {name}"
            )


def decode_lines(workdir, tmp_path, lines, *flags):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = run(
        ["decode.py", "--workdir", workdir, "--input", str(src), "--output", str(out), *flags]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [line.split("\t", 2) for line in text[:-1].split("\n")]


DECODE_INPUT = ["the dog sleeps", "", "the clever boy sees the dog", "a cat", ""]


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [
        ("--config.decode.strategy=beam", "--config.decode.n_best=3"),
        ("--config.decode.strategy=sample", "--config.decode.num_samples=3"),
    ],
    ids=["beam_n_best", "sample_num_samples"],
)
def test_decode_writes_index_score_text_lines_per_output(trained_run, tmp_path, flags):
    rows = decode_lines(trained_run, tmp_path, DECODE_INPUT, *flags)
    assert all(len(row) == 3 for row in rows), rows
    # Exactly three lines per input, grouped by input, indices the 0-based line numbers.
    assert [int(row[0]) for row in rows] == [i for i in range(len(DECODE_INPUT)) for _ in range(3)]
    for i, line in enumerate(DECODE_INPUT):
        group = rows[3 * i : 3 * i + 3]
        scores = [float(row[1]) for row in group]
        assert all(math.isfinite(x) for x in scores), group
        if "beam" in flags[0]:  # the n best, best first
            assert scores == sorted(scores, reverse=True), group
        if not line:
            assert [row[2] for row in group] == ["", "", ""], group
