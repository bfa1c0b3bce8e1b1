"""transformer-sweep --executor ray: a real two-node Ray cluster on this machine runs a tiny
sweep with the local executor's results, logs, resume and failure records; the dispatch and
the one-line errors without a cluster or without Ray."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types

import pytest

from tests.test_sweep import TINY
from transformer.cli import sweep as sweep_cli
from transformer.common.metrics_file import read_metrics
from transformer.research import sweep as sw
from transformer.research.sweep import ray_execution
from transformer.research.sweep.lifecycle import checkpoint_step, new_counts, runs_to_start
from transformer.research.sweep.ray_execution import MAX_RETRIES
from transformer.research.sweep.runs import last_train_step

# 20 steps at a rate high enough that the test hypotheses are not empty (BLEU 0, chrF > 0).
SHORT = {
    "train.num_steps": 20,
    "train.log_every": 10,
    "train.eval_every": 10,
    "train.checkpoint_every": 20,
    "train.learning_rate": 3e-2,
}
VARIANTS = {
    "pre": {"model.norm_position": "pre"},
    "diverges": {"train.learning_rate": 1e30},  # valid config, non-finite loss at run time
}


def _write_sweep(path, variants, seeds=(0,), steps=None):
    overrides = {**TINY, **(steps or SHORT)}
    path.write_text(
        "def get_config():\n"
        f"    return {{'base': 'configs/default.py', 'overrides': {overrides!r},\n"
        f"            'variants': {variants!r}, 'seeds': {list(seeds)!r},\n"
        "            'eval_split': 'test', 'eval_overrides': {'decode.strategy': 'greedy'},\n"
        "            'parallel': 2}\n"
    )
    return str(path)


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _ray_start(args, temp_dir):
    """`ray start ARGS` as the leader of a new process group: every process it leaves
    running (GCS, raylet, agents, workers and their subprocesses) stays in that group."""
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    ports = _free_ports(5)
    cmd = [
        ray,
        "start",
        *args,
        "--num-cpus=1",
        f"--temp-dir={temp_dir}",
        "--object-store-memory=100000000",
        f"--node-manager-port={ports[0]}",
        f"--object-manager-port={ports[1]}",
        f"--dashboard-agent-grpc-port={ports[2]}",
        f"--dashboard-agent-listen-port={ports[3]}",
        f"--metrics-export-port={ports[4]}",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        _stop_groups([proc.pid])
        pytest.fail(f"ray start {args} did not return within 180 s")
    if proc.returncode != 0:
        _stop_groups([proc.pid])
        pytest.fail(f"ray start {args} failed:\n{output[-3000:]}")
    return proc.pid


def _stop_groups(pgids):
    """SIGTERM the process groups, SIGKILL what is left after 5 s (the GCS lingers)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = [g for g in pgids if _signal_group(g, sig)]
        deadline = time.time() + 5
        while left and time.time() < deadline:
            time.sleep(0.2)
            left = [g for g in left if _signal_group(g, 0)]
        if not left:
            return


def _signal_group(pgid, sig) -> bool:
    """Sends `sig` to the group; False when none of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


@dataclasses.dataclass
class Cluster:
    address: str  # the head's HOST:PORT
    worker: int  # the worker node's session: every process of that node is in it


# The tests that need a cluster share one (starting its two nodes costs more than a sweep):
# one xdist group runs them in this file's order on one worker, and the test that kills the
# worker node comes last.
ON_THE_CLUSTER = pytest.mark.xdist_group("ray_cluster")


@pytest.fixture
def ray_cluster(ray_nodes):
    """A head and a worker node, one CPU each, on this machine: its address."""
    return ray_nodes.address


@pytest.fixture(scope="module")
def ray_nodes():
    """A head and a worker node, one CPU each, on this machine."""
    pytest.importorskip("ray", reason="the Ray executor needs Ray: pip install -e '.[cluster]'")
    with pytest.MonkeyPatch.context() as monkeypatch:
        # The nodes (`ray start` inherits the environment) and the driver (this process,
        # whose Ray reads it once) agree without a token, whether ~/.ray/auth_token exists.
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        yield from _started_nodes()


def _started_nodes():
    # Short: Ray's Unix socket paths under it must fit in 107 bytes.
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    (port,) = _free_ports(1)
    groups = []
    try:
        head = [
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ]
        groups.append(_ray_start(head, os.path.join(temp, "head")))
        groups.append(_ray_start([f"--address=127.0.0.1:{port}"], os.path.join(temp, "node")))
        yield Cluster(f"127.0.0.1:{port}", worker=groups[-1])
    finally:
        _stop_groups(groups)
        shutil.rmtree(temp, ignore_errors=True)


def _nodes_in_logs(workdir):
    """The Ray node ids that each phase's log says it ran on."""
    nodes = set()
    for root, _, files in os.walk(workdir):
        for name in files:
            if name.endswith(".log"):
                with open(os.path.join(root, name)) as f:
                    nodes.update(ln.split()[-1] for ln in f if ln.startswith("=== on ray node "))
    return nodes


def _attempts(log_path):
    with open(log_path) as f:
        return sum(line.startswith("=== 20") for line in f)


def _status(workdir, variant, seed=0):
    with open(os.path.join(workdir, variant, str(seed), "status.json")) as f:
        return json.load(f)


def _outcome_fields(status, workdir):
    """What a status.json records of an outcome, without times and this sweep's paths."""
    kept = {k: v for k, v in status.items() if k != "updated" and not k.endswith("_wall_s")}
    return json.loads(json.dumps(kept).replace(workdir, "DIR"))


@pytest.mark.slow
@ON_THE_CLUSTER
def test_a_sweep_on_a_two_node_ray_cluster_matches_the_local_executor(
    ray_cluster, tmp_path, capsys
):
    config = _write_sweep(tmp_path / "sweep_cfg.py", VARIANTS)
    on_ray, local = str(tmp_path / "ray"), str(tmp_path / "local")
    ray_args = [
        "--config",
        config,
        "--workdir",
        on_ray,
        "--poll_s",
        "1",
        "--executor",
        "ray",
        "--ray_address",
        ray_cluster,
    ]
    assert sweep_cli.main(ray_args) == 0
    out = capsys.readouterr().out
    header = f"sweep {config}: 2 run(s), as many at once as the Ray cluster's free resources "
    assert f"{header}allow -> {on_ray}" in out  # not the config's 'parallel': 2
    assert "ray cluster: 2 node(s), 2 CPU(s), 0 GPU(s); each run asks for 1 CPU(s)" in out
    assert os.path.isfile(os.path.join(on_ray, "ray.log"))
    assert f"[1/2] variant=pre seed=0: training (log: {on_ray}/pre/0/train.log)" in out
    assert "[1/2] variant=pre seed=0: training (step 20/20)" in out
    assert "[1/2] variant=pre seed=0: evaluating on test" in out
    assert "[1/2] variant=pre seed=0: done: test BLEU " in out
    assert "[2/2] variant=diverges seed=0: DIVERGED in train (exit 2): error: non-finite" in out
    assert len(_nodes_in_logs(on_ray)) == 2  # one CPU per node: the two runs split

    assert sweep_cli.main(["--config", config, "--workdir", local, "--poll_s", "1"]) == 0
    assert f"sweep {config}: 2 run(s), 2 at a time -> {local}" in capsys.readouterr().out
    ray_eval, local_eval = (os.path.join(d, "pre", "0", "eval") for d in (on_ray, local))
    for name in ("test.hyp.txt", "test.ref.txt"):
        with open(os.path.join(ray_eval, name)) as a, open(os.path.join(local_eval, name)) as b:
            assert a.read() == b.read() != "", name
    records = [json.load(open(os.path.join(d, "test.json"))) for d in (ray_eval, local_eval)]
    assert records[0]["step"] == records[1]["step"] == 20
    assert records[0]["bleu"] == records[1]["bleu"] and records[0]["chrf"] == records[1]["chrf"]
    assert records[0]["chrf"] > 0
    assert _outcome_fields(_status(on_ray, "pre"), on_ray) == _outcome_fields(
        _status(local, "pre"), local
    )
    diverged = _outcome_fields(_status(on_ray, "diverges"), on_ray)
    assert diverged == _outcome_fields(_status(local, "diverges"), local)
    assert diverged["status"] == "diverged" and diverged["phase"] == "train"

    # A second invocation finds everything settled: it starts no subprocess.
    assert sweep_cli.main(ray_args) == 0
    out = capsys.readouterr().out
    assert "[1/2] variant=pre seed=0: skipped (finished)" in out
    assert "[2/2] variant=diverges seed=0: skipped (diverged before; --retry_failed" in out
    for variant in VARIANTS:
        assert _attempts(os.path.join(on_ray, variant, "0", "train.log")) == 1


def _parse(*extra):
    return sweep_cli._parser().parse_args(["--config", "c.py", "--workdir", "w", *extra])


def test_executor_flag_picks_local_or_ray_with_the_same_signature(monkeypatch):
    assert sweep_cli._executor(_parse()) is sw.execute
    from transformer.research.sweep import ray_execution

    calls = []
    monkeypatch.setattr(ray_execution, "execute_on_ray", lambda runs, **kw: calls.append(kw))
    args = _parse("--executor", "ray", "--ray_address", "head-node:6379", "--gpus_per_run", "0.5")
    sweep_cli._executor(args)([], parallel=4, retry_failed=True, poll_s=2.0, out=None)
    assert calls == [
        {
            "address": "head-node:6379",
            "cpus_per_run": 1,
            "gpus_per_run": 0.5,
            "retry_failed": True,
            "poll_s": 2.0,
            "log_path": os.path.join("w", "ray.log"),
            "out": None,
        }
    ]


def _cli_error(tmp_path, capsys, *extra):
    config = _write_sweep(tmp_path / "sweep_cfg.py", {"pre": VARIANTS["pre"]})
    args = ["--config", config, "--workdir", str(tmp_path / "w"), "--executor", "ray", *extra]
    started = time.time()
    assert sweep_cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert time.time() - started < 30
    assert not os.path.exists(tmp_path / "w")  # nothing ran, nothing recorded
    return err


def test_an_unreachable_ray_address_is_a_one_line_error(tmp_path, capsys):
    pytest.importorskip("ray", reason="the Ray executor needs Ray: pip install -e '.[cluster]'")
    (port,) = _free_ports(1)  # closed again: nothing listens there
    err = _cli_error(tmp_path, capsys, "--ray_address", f"127.0.0.1:{port}")
    assert f"cannot reach Ray at 127.0.0.1:{port}" in err


def test_ray_missing_is_a_one_line_error_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    err = _cli_error(tmp_path, capsys)
    assert "pip install -e '.[cluster]'" in err


# ------------------------------------------------------------- lost nodes and Ctrl-C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Long enough to be caught between a checkpoint and the next (a step is logged every 5, a
# checkpoint saved every 10) before the run ends.
LONGER = {**SHORT, "train.num_steps": 40, "train.log_every": 5, "train.checkpoint_every": 10}
PRE = {"pre": {"model.norm_position": "pre"}}
SWEEP_LINE_STARTS = ("sweep ", "ray cluster: ", "[", "wrote ")


def _sweep_command(config, workdir, address=None):
    command = [sys.executable, "-m", "transformer.cli.sweep", "--config", config]
    command += ["--workdir", workdir, "--poll_s", "1"]
    if address:
        command += ["--executor", "ray", "--ray_address", address]
    return command


def _start_sweep(command):
    """The sweep as a terminal's foreground job: a process group of its own (Ctrl-C signals
    all of it), SIGINT at its default (a background job of a script would ignore it)."""
    return subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _finish(sweep, timeout=600):
    """(stdout, stderr) of the sweep process once it has ended."""
    try:
        return sweep.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(sweep.pid, signal.SIGKILL)
        pytest.fail(f"the sweep did not end within {timeout} s:\n{sweep.communicate()[0]}")


def _wait_for(condition, sweep, timeout=300):
    """condition()'s first true value, polled while the sweep runs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        if sweep.poll() is not None:
            pytest.fail(f"the sweep ended first (exit {sweep.returncode}):\n{_finish(sweep)}")
        time.sleep(0.05)
    os.killpg(sweep.pid, signal.SIGKILL)
    pytest.fail(f"not within {timeout} s: {condition}")


def _between_checkpoints(run_dir, last=None):
    """(newest checkpoint's step, last logged step) once the log has passed the checkpoint
    (and not passed step `last`): training resumes at the first, the log says the second."""
    saved, logged = checkpoint_step(run_dir), last_train_step(run_dir)
    if saved is not None and logged is not None and saved < logged <= (last or logged):
        return saved, logged
    return None


def _session(sid):
    """The processes of session `sid` (a Ray node started by `ray start` in a new session)."""
    pids = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # not a process, or gone
        if int(fields[3]) == sid:
            pids.append(int(name))
    return pids


def _training_in(sid):
    """(pid, run directory) of a train.py running in session `sid`, or None."""
    for pid in _session(sid):
        argv = _argv(pid)
        if "transformer.cli.train" in argv:
            workdir = next(a for a in argv if a.startswith("--workdir="))
            return pid, workdir.split("=", 1)[1]
    return None


def _freeze_between_checkpoints(pid, run_dir, sweep, last=None):
    """Stops train.py `pid` (SIGSTOP) where its log has passed its newest checkpoint (and not
    passed step `last`); returns (that checkpoint's step, the last logged step)."""
    while True:
        _wait_for(lambda: _between_checkpoints(run_dir, last), sweep)
        os.kill(pid, signal.SIGSTOP)
        steps = _between_checkpoints(run_dir, last)  # a save may have ended in between
        if steps:
            return steps
        os.kill(pid, signal.SIGCONT)


def _train_process(run_dir):
    """The pid of the train.py training `run_dir`, or None."""
    for name in filter(str.isdigit, os.listdir("/proc")):
        argv = _argv(name)
        if "transformer.cli.train" in argv and f"--workdir={run_dir}" in argv:
            return int(name)
    return None


def _argv(pid) -> list[str]:
    """The command line of process `pid`; empty once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().split("\0")
    except OSError:
        return []


def _stop_signal_pending(pid) -> bool:
    """Whether SIGINT or SIGTERM waits to be delivered to (stopped) process `pid`."""
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    with open(f"/proc/{pid}/status") as f:
        masks = [ln.split()[1] for ln in f if ln.startswith(("SigPnd:", "ShdPnd:"))]
    return any(int(mask, 16) & wanted for mask in masks)


def interrupt_mid_training(sweep, run_dir):
    """Ctrl-C to the sweep while its run's train.py is frozen (SIGSTOP) past a checkpoint and
    at least two log intervals before its last step; train.py goes on (SIGCONT) once the stop
    signal the interrupt sends it is pending. It then stops within a log interval, mid-training
    and past a checkpoint, however loaded the machine is and however long the signal takes."""
    steps, log_every = LONGER["train.num_steps"], LONGER["train.log_every"]
    pid = _wait_for(lambda: _train_process(run_dir), sweep)
    _freeze_between_checkpoints(pid, run_dir, sweep, last=steps - 2 * log_every)
    os.killpg(sweep.pid, signal.SIGINT)  # Ctrl-C in a terminal
    _wait_for(lambda: _stop_signal_pending(pid), sweep)
    os.kill(pid, signal.SIGCONT)


def _kill_session(sid):
    """SIGKILL to every process of session `sid`: the node dies at once, as a crashed host."""
    for pid in _session(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _resumed_steps(run_dir):
    """The steps train.py says it resumed from (its metrics.jsonl info rows)."""
    rows = read_metrics(os.path.join(run_dir, "metrics.jsonl"), kind="info")
    prefix = "resumed from checkpoint at step "
    return [int(r["message"][len(prefix) :]) for r in rows if r["message"].startswith(prefix)]


def _runs_csv_statuses(workdir):
    with open(os.path.join(workdir, "runs.csv")) as f:
        return {(r["variant"], r["seed"]): r["status"] for r in csv.DictReader(f)}


def _only_sweep_lines(out):
    """No line of Ray's own (such as '(raylet) The node ... has been marked dead')."""
    strays = [ln for ln in out.splitlines() if ln and not ln.startswith(SWEEP_LINE_STARTS)]
    assert strays == [], strays


@pytest.mark.slow
@ON_THE_CLUSTER
def test_ctrl_c_ends_a_ray_sweep_in_one_line_and_the_rerun_resumes_at_the_checkpoint(
    ray_cluster, tmp_path
):
    config = _write_sweep(tmp_path / "sweep_cfg.py", PRE, steps=LONGER)
    workdir = str(tmp_path / "w")
    run_dir = os.path.join(workdir, "pre", "0")
    command = _sweep_command(config, workdir, ray_cluster)
    sweep = _start_sweep(command)
    interrupt_mid_training(sweep, run_dir)
    out, err = _finish(sweep)
    assert sweep.returncode == 130
    assert err == "interrupted: rerun the same command to resume\n"
    _only_sweep_lines(out)
    assert os.path.isfile(os.path.join(workdir, "ray.log"))
    assert _status(workdir, "pre")["status"] == "training"  # left to resume
    saved = checkpoint_step(run_dir)  # the one train.py saved on its SIGTERM
    stop = re.compile(r"stopped by signal \d+ at step (\d+); checkpoint saved")
    stops = [stop.fullmatch(r["message"]) for r in read_metrics(run_dir, kind="info")]
    assert [int(m[1]) for m in stops if m] == [saved]

    rerun = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    line = f"[1/1] variant=pre seed=0: training (resuming from its checkpoint at step {saved})"
    assert line in rerun.stdout
    assert _resumed_steps(run_dir) == [saved]
    assert ": 1 done, 0 skipped, 0 failed, 0 diverged, 0 lost" in rerun.stdout
    assert _runs_csv_statuses(workdir) == {("pre", "0"): "done"}
    _only_sweep_lines(rerun.stdout)
    assert rerun.stderr == ""


@pytest.mark.slow
@ON_THE_CLUSTER  # last of the group: it kills the worker node
def test_a_run_lost_with_its_node_is_retried_on_the_cluster_and_matches_the_local_executor(
    ray_nodes, tmp_path, capsys
):
    config = _write_sweep(tmp_path / "sweep_cfg.py", PRE, seeds=(0, 1), steps=LONGER)
    on_ray, local = str(tmp_path / "ray"), str(tmp_path / "local")
    sweep = _start_sweep(_sweep_command(config, on_ray, ray_nodes.address))
    # One CPU per node: one run trains on the worker node. Frozen past a checkpoint, the node
    # is killed with everything on it.
    pid, run_dir = _wait_for(lambda: _training_in(ray_nodes.worker), sweep)
    saved, logged = _freeze_between_checkpoints(pid, run_dir, sweep)
    _kill_session(ray_nodes.worker)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # were it outside the session, it would stay stopped
    out, err = _finish(sweep)
    assert sweep.returncode == 0, out + err
    seed = int(os.path.basename(run_dir))
    tag = f"[{seed + 1}/2] variant=pre seed={seed}"

    assert f"{tag}: lost on Ray (" in out
    assert f"; retry 1 of {MAX_RETRIES}: it resumes from its checkpoint at step {saved}\n" in out
    assert f"{tag}: training (resuming from its checkpoint at step {saved}) (log: " in out
    assert _resumed_steps(run_dir) == [saved]  # where train.py says it resumed, not `logged`
    assert ": 2 done, 0 skipped, 0 failed, 0 diverged, 0 lost\n" in out
    assert _runs_csv_statuses(on_ray) == {("pre", "0"): "done", ("pre", "1"): "done"}
    assert _attempts(os.path.join(run_dir, "train.log")) == 2
    assert len(_nodes_in_logs(run_dir)) == 2  # the second attempt ran on the head
    _only_sweep_lines(out)
    assert err == ""
    assert os.path.isfile(os.path.join(on_ray, "ray.log"))

    # The retried run is the run the local executor trains in one go.
    alone = _write_sweep(tmp_path / "local_cfg.py", PRE, seeds=(seed,), steps=LONGER)
    assert sweep_cli.main(["--config", alone, "--workdir", local, "--poll_s", "1"]) == 0
    capsys.readouterr()
    ray_eval, local_eval = (os.path.join(d, "pre", str(seed), "eval") for d in (on_ray, local))
    for name in ("test.hyp.txt", "test.json"):
        with open(os.path.join(ray_eval, name)) as a, open(os.path.join(local_eval, name)) as b:
            ray_text, local_text = a.read(), b.read()
        if name.endswith(".json"):  # the same figures, written at other times
            ray_text, local_text = (_scores(json.loads(t)) for t in (ray_text, local_text))
        assert ray_text == local_text != "", name
    assert _outcome_fields(_status(on_ray, "pre", seed), on_ray) == _outcome_fields(
        _status(local, "pre", seed), local
    )


def _scores(record):
    return {k: record[k] for k in ("step", "bleu", "chrf")}


# ------------------------------------------ loss, retry and failure without a cluster


class _Tasks:
    """ray_execution._Tasks without Ray: records the attempts submitted."""

    def __init__(self):
        self.streams, self.submitted = {}, []

    def submit(self, attempt):
        self.submitted.append(attempt)


def _ending_with(error):
    """A task's progress stream whose next item raises `error`, as Ray's does."""
    raise error
    yield


def _planned_run(tmp_path):
    config = _write_sweep(tmp_path / "sweep_cfg.py", PRE)
    (run,) = sw.plan_runs(sw.load_sweep(config), str(tmp_path / "w"))
    return run


def _end_task(attempt, error, tasks, counts):
    """ray_execution._take on a task that raised `error`: the line it printed."""
    ray = pytest.importorskip("ray")
    stream = _ending_with(error)
    tasks.streams[stream] = attempt
    out = io.StringIO()
    fake_ray = types.SimpleNamespace(exceptions=ray.exceptions, get=lambda item: item)
    ray_execution._take(fake_ray, stream, tasks, counts, out)
    assert stream not in tasks.streams
    return out.getvalue()


def test_a_lost_run_is_retried_max_retries_times_then_recorded_lost_as_runs_csv_says(
    tmp_path,
):
    ray = pytest.importorskip("ray")
    run = _planned_run(tmp_path)
    tasks, counts = _Tasks(), {**new_counts(), "lost": 0}
    attempt = ray_execution._Attempt(1, run, 1)
    lost = ray.exceptions.NodeDiedError("Task failed because the node it was running on is dead")
    os.makedirs(os.path.join(run.workdir, "checkpoints", "30"))
    os.makedirs(os.path.join(run.workdir, "checkpoints", "40.orbax-checkpoint-tmp"))
    lines = []
    for retry in range(1, MAX_RETRIES + 1):
        lines.append(_end_task(attempt, lost, tasks, counts))
        attempt = tasks.submitted[-1]
        assert attempt.retry == retry and attempt.run is run
        assert _status(str(tmp_path / "w"), "pre")["status"] == "lost"
    assert lines[0] == (
        "[1/1] variant=pre seed=0: lost on Ray (NodeDiedError: Task failed because the node "
        f"it was running on is dead); retry 1 of {MAX_RETRIES}: it resumes from its "
        "checkpoint at step 30\n"
    )
    last = _end_task(attempt, lost, tasks, counts)
    assert len(tasks.submitted) == MAX_RETRIES  # no further retry
    assert last.startswith(f"[1/1] variant=pre seed=0: LOST on Ray {MAX_RETRIES + 1} times")
    assert last.endswith("rerun the same command to resume it\n")
    assert counts == {"done": 0, "skipped": 0, "failed": 0, "diverged": 0, "lost": 1}
    # runs.csv and the summary agree: the status.json both come from says 'lost'.
    sweep = sw.load_sweep(str(tmp_path / "sweep_cfg.py"))
    sw.write_report(sweep, [run], str(tmp_path / "w"))
    assert _runs_csv_statuses(str(tmp_path / "w")) == {("pre", "0"): "lost"}
    # Not failed: the next invocation runs it again.
    assert runs_to_start([run], False, new_counts(), print) == [(1, run)]


def test_a_retry_says_it_restarts_from_scratch_where_the_run_directory_is_not_shared(tmp_path):
    ray = pytest.importorskip("ray")
    run = _planned_run(tmp_path)
    # Its task had begun (a progress line came), yet the driver sees no run directory.
    attempt = ray_execution._Attempt(1, run, 1, started=True)
    counts = {**new_counts(), "lost": 0}
    line = _end_task(attempt, ray.exceptions.WorkerCrashedError(), _Tasks(), counts)
    assert line.endswith(
        f"retry 1 of {MAX_RETRIES}: {run.workdir} is not on a filesystem this machine shares, "
        "so on another node it restarts from scratch\n"
    )


def test_a_task_that_fails_in_its_own_code_is_recorded_failed_not_retried(tmp_path):
    ray = pytest.importorskip("ray")
    run = _planned_run(tmp_path)
    cause = FileNotFoundError("ray node N cannot enter /shared/study: the sweep's working ...")
    error = ray.exceptions.RayTaskError("_run_task", "Traceback ...", cause)
    tasks, counts = _Tasks(), {**new_counts(), "lost": 0}
    line = _end_task(ray_execution._Attempt(1, run, 1), error, tasks, counts)
    assert line == (
        "[1/1] variant=pre seed=0: FAILED on Ray: FileNotFoundError: ray node N cannot enter "
        "/shared/study: the sweep's working ...\n"
    )
    assert tasks.submitted == [] and counts["failed"] == 1
    status = _status(str(tmp_path / "w"), "pre")
    assert (status["status"], status["phase"]) == ("failed", "ray")
