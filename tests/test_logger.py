"""transformer.training.logger and the metrics.jsonl format it writes
(transformer.common.metrics_file): rows, TensorBoard scalars, progress lines, resume."""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from transformer.common.errors import UserError
from transformer.common.metrics_file import read_metrics
from transformer.training import logger as logger_lib
from transformer.training.logger import MetricsLogger, format_eta, format_progress


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _train(step, loss=2.0):
    return {"loss": loss, "nll": loss - 0.1, "learning_rate": 1e-3, "tokens_per_s": 12345.6}


def _read_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} from every event file under logdir, without TensorFlow."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        EventAccumulator = None
    if EventAccumulator is not None:
        acc = EventAccumulator(str(logdir))
        acc.Reload()
        return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    out: dict[str, list[tuple[int, float]]] = {}
    for event in _read_events(logdir):
        for v in event.summary.value:
            if v.HasField("simple_value"):
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def _read_events(logdir):
    """Parses TFRecord-framed Event protos with tensorboardX's own proto module."""
    logger_lib._import_summary_writer()
    from tensorboardX.proto import event_pb2

    events = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            pos += 12  # length + its crc
            event = event_pb2.Event()
            event.ParseFromString(data[pos : pos + length])
            pos += length + 4  # payload + its crc
            events.append(event)
    return events


def test_format_eta():
    assert format_eta(0) == "0:00:00"
    assert format_eta(754) == "0:12:34"
    assert format_eta(3600 * 27 + 184.4) == "27:03:04"
    assert format_eta(None) == "?"
    assert format_eta(float("inf")) == "?"
    assert format_eta(-1) == "?"


def test_format_progress():
    line = format_progress(
        1200,
        20000,
        {"loss": 2.3449, "nll": 2.1, "learning_rate": 0.0012, "tokens_per_s": 12345.4},
        754,
    )
    assert line == (
        "step 1200/20000 | loss 2.345 | nll 2.100 | lr 1.2e-03 | 12,345 tok/s | eta 0:12:34"
    )
    assert format_progress(5, 10, {"loss": float("nan")}, None) == "step 5/10 | loss nan | eta ?"


def test_jsonl_rows_and_progress(tmp_path):
    out = io.StringIO()
    clock = FakeClock()
    with MetricsLogger(tmp_path, total_steps=1000, stream=out, clock=clock) as log:
        log.log_text("parameters: 1,234", num_params=1234)
        log.log_train(100, _train(100))
        clock.t += 10.0  # 100 steps in 10 s
        log.log_train(200, {**_train(200), "accuracy": np.float32(0.5)})
        log.log_eval(200, {"bleu": 27.25, "chrf": 55.0, "loss": np.array(1.5)})
        log.log_eval(200, {"bleu": 26.0}, split="test")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["kind"] for r in rows] == ["info", "train", "train", "eval", "eval"]
    info, t1, t2, e1, e2 = rows
    assert info["message"] == "parameters: 1,234" and info["num_params"] == 1234
    assert t1["step"] == 100 and t1["loss"] == 2.0 and t1["learning_rate"] == 1e-3
    assert t1["tokens_per_s"] == pytest.approx(12345.6)
    assert isinstance(t2["accuracy"], float) and t2["accuracy"] == 0.5
    assert all(isinstance(r["time"], float) and r["time"] > 1e9 for r in rows)
    assert e1 == {**e1, "step": 200, "split": "valid", "bleu": 27.25, "loss": 1.5}
    assert e2["split"] == "test" and e2["bleu"] == 26.0
    assert "split" not in t1
    assert [r["step"] for r in read_metrics(tmp_path, kind="train")] == [100, 200]
    # One JSON object per line, each line complete.
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(x) for x in lines)

    printed = out.getvalue().splitlines()
    assert printed[0] == "parameters: 1,234"
    assert printed[1] == (
        "step 100/1000 | loss 2.000 | nll 1.900 | lr 1.0e-03 | 12,346 tok/s | eta ?"
    )
    # 0.1 s/step, 800 steps left.
    assert printed[2].startswith("step 200/1000 | loss 2.000 | nll 1.900 | acc 0.500 |")
    assert printed[2].endswith("| 12,346 tok/s | eta 0:01:20")
    assert printed[3].startswith("eval valid step 200 | bleu 27.25")


def test_eta_moving_average(tmp_path):
    clock = FakeClock()
    log = MetricsLogger(
        tmp_path,
        total_steps=100,
        stream=io.StringIO(),
        clock=clock,
        eta_window=2,
        tensorboard=False,
    )
    assert log.eta_seconds(0) is None
    log.log_train(0, _train(0))
    for seconds in (100.0, 1.0, 1.0):  # a slow first interval (compilation) ages out
        clock.t += seconds
        log.log_train(log._last_train[1] + 10, _train(0))
    assert log.eta_seconds(30) == pytest.approx(70 * 0.1)
    log.close()


def test_truncated_last_line_is_tolerated(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO(), tensorboard=False) as log:
        log.log_train(1, _train(1))
        log.log_train(2, _train(2))
    full = path.read_bytes()
    path.write_bytes(full + b'{"step": 3, "kind": "train", "lo')  # killed mid-write
    assert [r["step"] for r in read_metrics(path)] == [1, 2]
    # A new logger cuts the partial line before appending, so the file stays valid.
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO(), tensorboard=False) as log:
        log.log_train(3, _train(3))
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    assert path.read_bytes().endswith(b"}\n")


def test_whole_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "kind": "train", "loss": 1.0}')
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO(), tensorboard=False) as log:
        log.log_train(2, _train(2))
    assert [r["step"] for r in read_metrics(path)] == [1, 2]


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(UserError, match="line 2"):
        read_metrics(path)


def test_read_metrics_missing_file(tmp_path):
    assert read_metrics(tmp_path / "metrics.jsonl") == []


def test_truncate_after(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO()) as log:
        log.log_text("start")
        for step in range(1, 7):
            log.log_train(step, _train(step))
        log.log_eval(3, {"bleu": 10.0})
        log.log_eval(6, {"bleu": 12.0})
        log.log_text("late", step=6)
    with path.open("ab") as f:
        f.write(b'{"step": 7, "ki')  # killed mid-write
    # Resume from the checkpoint at step 4.
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO()) as log:
        assert log.truncate_after(4) == 4  # train 5, 6; eval 6; info at 6
        assert [(r["kind"], r.get("step")) for r in read_metrics(path)] == [
            ("info", None),
            ("train", 1),
            ("train", 2),
            ("train", 3),
            ("train", 4),
            ("eval", 3),
        ]
        for step in (5, 6):
            log.log_train(step, _train(step, loss=1.0))
    train_steps = [r["step"] for r in read_metrics(path, kind="train")]
    assert train_steps == [1, 2, 3, 4, 5, 6]
    assert read_metrics(path, kind="train")[-1]["loss"] == 1.0
    assert not list(tmp_path.glob(".metrics.jsonl.*"))  # no temp file left behind
    # TensorBoard was told to purge the old steps 5 and 6.
    events = _read_events(tmp_path / "tensorboard")
    starts = [e.step for e in events if e.HasField("session_log") and e.session_log.status == 1]
    assert 5 in starts


def test_truncate_after_without_file(tmp_path):
    with MetricsLogger(tmp_path, total_steps=10, tensorboard=False) as log:
        assert log.truncate_after(3) == 0


def test_tensorboard_scalars(tmp_path):
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO()) as log:
        log.log_train(1, _train(1, loss=3.0))
        log.log_train(2, _train(2, loss=2.5))
        log.log_eval(2, {"bleu": 20.5, "chrf": 50.0})
        log.log_eval(2, {"bleu": 19.0}, split="test")
    files = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert files and all(f.stat().st_size > 0 for f in files)
    scalars = _read_scalars(tmp_path / "tensorboard")
    assert scalars["train/loss"] == [(1, 3.0), (2, 2.5)]
    assert [s for s, _ in scalars["train/learning_rate"]] == [1, 2]
    assert scalars["valid/bleu"] == [(2, 20.5)]
    assert scalars["valid/chrf"] == [(2, 50.0)]
    assert scalars["test/bleu"] == [(2, 19.0)]


def _script(body: str) -> str:
    """Python source that imports transformer.training.logger without the package __init__ (JAX)."""
    import transformer

    return (
        "import sys, io, types\n"
        "pkg = types.ModuleType('transformer')\n"
        f"pkg.__path__ = [{transformer.__path__[0]!r}]\n"
        "sys.modules['transformer'] = pkg\n"
        "from transformer.training.logger import MetricsLogger\n" + body
    )


def test_tensorboard_does_not_import_torch_or_tensorflow(tmp_path):
    # A stand-in torch package that tensorboardX would import if it were let: the test
    # needs no PyTorch, and a real one would take seconds to load.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("Tensor = object\n")
    code = _script(
        f"log = MetricsLogger({str(tmp_path / 'run')!r}, total_steps=2, stream=io.StringIO())\n"
        "log.log_train(1, {'loss': 1.0})\n"
        "log.close()\n"
        "assert 'tensorboardX' in sys.modules\n"
        "assert 'torch' not in sys.modules, 'torch imported (or blocked in sys.modules)'\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
        "hooks = [type(f).__name__ for f in sys.meta_path]\n"  # six adds its own: not ours
        "assert '_NoTorchForTensorboardX' not in hooks, 'the import hook was left behind'\n"
        "import torch\n"  # the rest of the process imports torch as usual
        f"assert torch.__file__.startswith({str(tmp_path)!r}), torch.__file__\n"
    )
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_the_torch_hook_blocks_only_imports_made_by_tensorboardx_code():
    # Asked from tensorboardX's frames, the finder refuses torch; asked from anywhere else
    # (this test, another thread) it passes the import on to the next finder.
    finder = logger_lib._NoTorchForTensorboardX()
    assert finder.find_spec("torch") is None
    assert finder.find_spec("numpy") is None
    as_tensorboardx = {"__name__": "tensorboardX.writer", "finder": finder}
    for name in ("torch", "torch.nn"):
        with pytest.raises(ModuleNotFoundError, match=name):
            exec(f"finder.find_spec({name!r})", as_tensorboardx)
    assert eval("finder.find_spec('numpy')", as_tensorboardx) is None


def test_survives_kill_9(tmp_path):
    code = _script(
        f"log = MetricsLogger({str(tmp_path)!r}, total_steps=10**9, stream=io.StringIO())\n"
        "step = 0\n"
        "while True:\n"
        "    step += 1\n"
        "    log.log_train(step, {'loss': 1.0, 'learning_rate': 1e-3, 'tokens_per_s': 1.0})\n"
    )
    path = tmp_path / "metrics.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if path.exists() and path.stat().st_size > 20_000:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "logging subprocess exited early"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    steps = [r["step"] for r in read_metrics(path, kind="train")]
    assert len(steps) > 10 and steps == list(range(1, len(steps) + 1))
    # Resume at an earlier checkpoint: no duplicate steps afterwards.
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO()) as log:
        log.truncate_after(5)
        log.log_train(6, _train(6))
    assert [r["step"] for r in read_metrics(path, kind="train")] == [1, 2, 3, 4, 5, 6]


def test_disabled_logger_writes_nothing(tmp_path, capsys):
    workdir = tmp_path / "run"
    with MetricsLogger(workdir, enabled=False, total_steps=10) as log:
        log.log_text("hello")
        log.log_train(1, _train(1))
        log.log_eval(1, {"bleu": 1.0})
        assert log.truncate_after(0) == 0
    assert not workdir.exists()
    assert capsys.readouterr().out == ""


def test_bad_metrics_are_rejected(tmp_path):
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO(), tensorboard=False) as log:
        with pytest.raises(TypeError, match="'loss'"):
            log.log_train(1, {"loss": "high"})
        with pytest.raises(ValueError, match="reserved"):
            log.log_train(1, {"step": 1.0})
        with pytest.raises(ValueError, match="split"):
            log.log_eval(1, {"bleu": 1.0}, split="a/b")
    assert read_metrics(tmp_path) == []
    with pytest.raises(RuntimeError, match="closed"):
        log.log_train(1, {"loss": 1.0})


def test_nan_loss_is_recorded(tmp_path):
    with MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO(), tensorboard=False) as log:
        log.log_train(1, {"loss": float("nan")})
    (row,) = read_metrics(tmp_path)
    assert np.isnan(row["loss"])
