"""Running a sweep's runs on a Ray cluster: `execute_on_ray` settles the runs that need no
subprocess on the driver, exactly as the local executor does, then submits one Ray task per
remaining run with its CPU/GPU request. A task moves its run through train -> eval with the
local executor's `RunJob` (lifecycle.py) in the driver's working directory, which every node
must see at the same path (a shared filesystem): the same commands, status.json fields, logs
and outcomes. Each task streams its progress lines back; the driver prints them as they come.

Ray is imported here only, and lazily: the package works without it."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time

from transformer.common.errors import UserError
from transformer.research.sweep.execution import DEFAULT_POLL_S, printer
from transformer.research.sweep.lifecycle import (
    INTERRUPTED,
    RunJob,
    new_counts,
    runs_to_start,
)
from transformer.research.sweep.runs import Run

# The TCP probe of --ray_address answers in seconds where Ray's own connection retries for
# minutes.
CONNECT_TIMEOUT_S = 10.0
CANCEL_GRACE_S = 90.0  # a cancelled task waits up to 60 s for train.py's SIGTERM checkpoint


def execute_on_ray(
    runs: list[Run],
    *,
    address: str | None = None,
    cpus_per_run: float = 1,
    gpus_per_run: float = 0,
    retry_failed: bool = False,
    poll_s: float = DEFAULT_POLL_S,
    out=None,
) -> dict[str, int]:
    """Runs what is not finished on the Ray cluster at `address` (None: Ray's own choice,
    RAY_ADDRESS or the cluster started on this machine); returns counts of done / skipped /
    failed / diverged, as `execute` does."""
    out = out or sys.stdout
    _check_request(cpus_per_run, gpus_per_run)
    ray = _import_ray()
    with _connected(ray, address):
        _print_cluster(ray, cpus_per_run, gpus_per_run, out)
        counts = new_counts()
        pending = runs_to_start(runs, retry_failed, counts, printer(out))
        tasks = _submit(ray, pending, len(runs), cpus_per_run, gpus_per_run, poll_s)
        _follow(ray, tasks, counts, out)
    return counts


def _check_request(cpus_per_run: float, gpus_per_run: float) -> None:
    """Ray's rule: no negative amounts, and a fraction of a GPU only below one."""
    if cpus_per_run < 0 or gpus_per_run < 0 or (gpus_per_run > 1 and gpus_per_run % 1):
        raise UserError(
            f"--cpus_per_run {cpus_per_run:g} --gpus_per_run {gpus_per_run:g}: expected "
            "amounts >= 0, and a whole number of GPUs above 1"
        )


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise UserError(f"--executor ray needs Ray ({e}): pip install -e '.[cluster]'") from None
    return ray


@contextlib.contextmanager
def _connected(ray, address: str | None):
    """Connected to the cluster for the block; a connection the caller made is kept."""
    if ray.is_initialized():
        yield
        return
    _connect(ray, address)
    try:
        yield
    finally:
        ray.shutdown()


def _connect(ray, address: str | None) -> None:
    """ray.init at `address` (None: 'auto'), or a one-line UserError that says why not."""
    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    if target not in ("auto", "local"):
        _probe(target)
    try:
        ray.init(address=address or "auto", logging_level="warning", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        if target == "auto" and isinstance(e, ConnectionError):
            raise UserError(
                "no Ray cluster found (RAY_ADDRESS is unset and none runs on this machine): "
                "pass --ray_address HOST:PORT of its head, or 'local' to start one here"
            ) from None
        raise UserError(f"cannot connect to Ray at {target}: {_one_line(e)}") from None


def _probe(address: str) -> None:
    """A one-line error within seconds when nothing listens at host:port (Ray itself retries
    for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise UserError(f"--ray_address {address}: expected HOST:PORT, 'auto' or 'local'")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise UserError(
            f"cannot reach Ray at {address}: {e.strerror or e}; start the cluster "
            f"(ray start --head) or pass the head's --ray_address HOST:PORT"
        ) from None


def _print_cluster(ray, cpus_per_run: float, gpus_per_run: float, out) -> None:
    """The cluster's size and the request of each run; a warning when no node has room for
    one (the runs then wait for an autoscaler to add such a node)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    total = ray.cluster_resources()
    print(
        f"ray cluster: {len(nodes)} node(s), {total.get('CPU', 0):g} CPU(s), "
        f"{total.get('GPU', 0):g} GPU(s); each run asks for {cpus_per_run:g} CPU(s), "
        f"{gpus_per_run:g} GPU(s)",
        file=out,
        flush=True,
    )
    fits = [
        n
        for n in nodes
        if n["Resources"].get("CPU", 0) >= cpus_per_run
        and n["Resources"].get("GPU", 0) >= gpus_per_run
    ]
    if not fits:
        print(
            "warning: no node has that many CPUs and GPUs; the runs wait until one joins",
            file=out,
            flush=True,
        )


def _submit(ray, pending, total, cpus_per_run, gpus_per_run, poll_s) -> dict:
    """{task's progress stream: its run's '[i/n] label'}, in the sweep's order."""
    # No retries: a retried stream would repeat lines; a run lost with its node is reported
    # and, not being recorded as failed, runs again (resuming) on the next invocation.
    task = ray.remote(_run_task).options(
        num_cpus=cpus_per_run,
        num_gpus=gpus_per_run,
        num_returns="streaming",
        max_retries=0,
        scheduling_strategy="SPREAD",
    )
    cwd = os.getcwd()
    return {
        task.remote(run, i, total, cwd, poll_s, gpus_per_run): f"[{i}/{total}] {run.label}"
        for i, run in pending
    }


def _follow(ray, tasks: dict, counts: dict, out) -> None:
    """Prints the tasks' lines as they come and counts their outcomes until all have ended;
    on Ctrl-C cancels them (each stops its train.py with SIGTERM, which checkpoints)."""
    try:
        while tasks:
            ready, _ = ray.wait(list(tasks), num_returns=1, timeout=1.0)
            for stream in ready:
                _take(ray, stream, tasks, counts, out)
    except KeyboardInterrupt:
        _cancel(ray, tasks)
        print(INTERRUPTED, file=out, flush=True)
        raise


def _take(ray, stream, tasks: dict, counts: dict, out) -> None:
    """Handles a task's next item: a progress line, its run's outcome, its end or its loss."""
    try:
        kind, value = ray.get(next(stream))
    except StopIteration:
        del tasks[stream]
        return
    except ray.exceptions.RayError as e:
        counts["failed"] += 1
        tag = tasks.pop(stream)
        print(f"{tag}: FAILED on Ray (rerun to resume): {_one_line(e)}", file=out, flush=True)
        return
    if kind == "line":
        print(value, file=out, flush=True)
    else:
        counts[value] += 1


def _cancel(ray, tasks: dict) -> None:
    """Cancels the tasks and waits for them to stop their subprocesses; one that does not
    within the grace has its worker killed, and Ray ends the worker's subprocesses with it."""
    for stream in tasks:
        ray.cancel(stream)
    deadline = time.time() + CANCEL_GRACE_S
    while tasks and time.time() < deadline:
        ready, _ = ray.wait(list(tasks), num_returns=1, timeout=1.0)
        for stream in ready:
            try:
                ray.get(next(stream))
            except (StopIteration, ray.exceptions.RayError):
                del tasks[stream]
    for stream in tasks:
        ray.cancel(stream, force=True)


def _one_line(error: BaseException) -> str:
    """The error's first line that says something (Ray's errors span a traceback)."""
    cause = getattr(error, "cause", None)  # RayTaskError: the task's own exception
    if isinstance(cause, BaseException):
        error = cause
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    return f"{type(error).__name__}: {text}"[:300]


def _run_task(run: Run, index: int, total: int, cwd: str, poll_s: float, gpus_per_run: float):
    """The Ray task of one run: train -> eval on this node in the driver's directory. Yields
    ('line', progress line)s, then ('outcome', 'done' | 'failed' | 'diverged')."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    _enter(cwd, node)
    lines: list[str] = []
    job = RunJob(run, index, total, _task_env(gpus_per_run), lines.append, f"ray node {node}")
    try:
        job.begin()
        outcome = None
        while outcome is None:
            yield from _drain(lines)
            time.sleep(min(0.5, poll_s))
            outcome = job.step(poll_s)
        yield from _drain(lines)
        yield ("outcome", outcome)
    finally:
        # ray.cancel raises KeyboardInterrupt in the task: the subprocess gets SIGTERM, on
        # which train.py checkpoints.
        job.kill()


def _enter(cwd: str, node: str) -> None:
    """Moves this worker into the driver's directory, where the runs' relative paths are."""
    try:
        os.chdir(cwd)
    except OSError as e:
        raise FileNotFoundError(
            f"ray node {node} cannot enter {cwd} ({e.strerror}): the sweep's working "
            f"directory must be on a filesystem every node mounts at the same path"
        ) from None


def _task_env(gpus_per_run: float) -> dict:
    """The phase subprocesses' environment: the worker's, with Ray's CUDA_VISIBLE_DEVICES
    for this task; a fraction of a GPU also caps JAX's share of its memory."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if 0 < gpus_per_run < 1:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 * gpus_per_run:.2f}"
    return env


def _drain(lines: list[str]):
    while lines:
        yield ("line", lines.pop(0))
