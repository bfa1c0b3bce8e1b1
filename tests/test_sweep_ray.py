"""transformer-sweep --executor ray: a real two-node Ray cluster on this machine runs a tiny
sweep with the local executor's results, logs, resume and failure records; the dispatch and
the one-line errors without a cluster or without Ray."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.test_sweep import TINY
from transformer.cli import sweep as sweep_cli
from transformer.research import sweep as sw

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


def _write_sweep(path, variants, seeds=(0,)):
    path.write_text(
        "def get_config():\n"
        f"    return {{'base': 'configs/default.py', 'overrides': { ({**TINY, **SHORT})!r},\n"
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


@pytest.fixture
def ray_cluster(monkeypatch):
    """A head and a worker node, one CPU each, on this machine: its address."""
    # The nodes (`ray start` inherits the environment) and the driver (this process, whose
    # Ray reads it once) agree without a token, whether ~/.ray/auth_token exists or not.
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    pytest.importorskip("ray", reason="the Ray executor needs Ray: pip install -e '.[cluster]'")
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
        yield f"127.0.0.1:{port}"
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


def _status(workdir, variant):
    with open(os.path.join(workdir, variant, "0", "status.json")) as f:
        return json.load(f)


def _outcome_fields(status, workdir):
    """What a status.json records of an outcome, without times and this sweep's paths."""
    kept = {k: v for k, v in status.items() if k != "updated" and not k.endswith("_wall_s")}
    return json.loads(json.dumps(kept).replace(workdir, "DIR"))


@pytest.mark.slow
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
    assert "ray cluster: 2 node(s), 2 CPU(s), 0 GPU(s); each run asks for 1 CPU(s)" in out
    assert f"[1/2] variant=pre seed=0: training (log: {on_ray}/pre/0/train.log)" in out
    assert "[1/2] variant=pre seed=0: training (step 20/20)" in out
    assert "[1/2] variant=pre seed=0: evaluating on test" in out
    assert "[1/2] variant=pre seed=0: done: test BLEU " in out
    assert "[2/2] variant=diverges seed=0: DIVERGED in train (exit 2): error: non-finite" in out
    assert len(_nodes_in_logs(on_ray)) == 2  # one CPU per node: the two runs split

    assert sweep_cli.main(["--config", config, "--workdir", local, "--poll_s", "1"]) == 0
    capsys.readouterr()
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
