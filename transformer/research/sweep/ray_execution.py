"""Running a sweep's runs on a Ray cluster: `execute_on_ray` settles the runs that need no
subprocess on the driver, exactly as the local executor does, then submits one Ray task per
remaining run with its CPU/GPU request. A task moves its run through train -> eval with the
local executor's `RunJob` (lifecycle.py) in the driver's working directory, which every node
must see at the same path (a shared filesystem): the same commands, status.json fields, logs
and outcomes. Each task streams its progress lines back; the driver prints them as they come.

A run lost with its node or worker (Ray's node-death, worker-crash, actor-died or object-lost
errors, not a run that failed or diverged by itself) is submitted again, at most MAX_RETRIES
times; train.py resumes it from its newest checkpoint in the shared run directory. Its
status.json says 'lost' while it is, so runs.csv and the sweep's summary agree. Ray's own
log lines go to a log file (the CLI's: DIR/ray.log), not to the sweep's output.

Ray is imported here only, and lazily: the package works without it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import time

from transformer.common.errors import UserError
from transformer.research.sweep.execution import DEFAULT_POLL_S, printer
from transformer.research.sweep.lifecycle import (
    RunJob,
    checkpoint_step,
    new_counts,
    runs_to_start,
    was_trained,
)
from transformer.research.sweep.runs import Run, write_status

# The TCP probe of --ray_address answers in seconds where Ray's own connection retries for
# minutes.
CONNECT_TIMEOUT_S = 10.0
CANCEL_GRACE_S = 90.0  # a cancelled task waits up to 60 s for train.py's SIGTERM checkpoint
MAX_RETRIES = 2  # times a run lost with its node or worker is submitted again


def execute_on_ray(
    runs: list[Run],
    *,
    address: str | None = None,
    cpus_per_run: float = 1,
    gpus_per_run: float = 0,
    retry_failed: bool = False,
    poll_s: float = DEFAULT_POLL_S,
    log_path: str | None = None,
    out=None,
) -> dict[str, int]:
    """Runs what is not finished on the Ray cluster at `address` (None: Ray's own choice,
    RAY_ADDRESS or the cluster started on this machine); returns counts of done / skipped /
    failed / diverged, as `execute` does, and lost (with its node, MAX_RETRIES + 1 times).
    Ray's own output goes to `log_path` (None: where Ray puts it, the driver's stderr)."""
    out = out or sys.stdout
    _check_request(cpus_per_run, gpus_per_run)
    ray = _import_ray()
    _probe(address or os.environ.get("RAY_ADDRESS") or "auto")
    with _ray_output_to(log_path), _connected(ray, address):
        _print_cluster(ray, cpus_per_run, gpus_per_run, out)
        counts = {**new_counts(), "lost": 0}
        pending = runs_to_start(runs, retry_failed, counts, printer(out))
        tasks = _Tasks(ray, cpus_per_run, gpus_per_run, poll_s)
        for i, run in pending:
            tasks.submit(_Attempt(i, run, len(runs)))
        _follow(ray, tasks, counts, out)
    return counts


@dataclasses.dataclass
class _Attempt:
    """One submission of a run; a lost one is submitted again as its next attempt."""

    index: int
    run: Run
    total: int
    retry: int = 0  # how many times it was lost before this attempt
    started: bool = False  # a progress line came: its task had made the run directory

    @property
    def tag(self) -> str:
        return f"[{self.index}/{self.total}] {self.run.label}"


class _Tasks:
    """The runs' Ray tasks in flight: {progress stream: _Attempt}."""

    def __init__(self, ray, cpus_per_run: float, gpus_per_run: float, poll_s: float):
        # No Ray retries: Ray would replay a retried task's progress stream; a lost run is
        # submitted again by `_retry` instead, as a new task with a stream of its own.
        self.remote = ray.remote(_run_task).options(
            num_cpus=cpus_per_run,
            num_gpus=gpus_per_run,
            num_returns="streaming",
            max_retries=0,
            scheduling_strategy="SPREAD",
        )
        self.args = (os.getcwd(), poll_s, gpus_per_run)
        self.streams: dict = {}

    def submit(self, attempt: _Attempt) -> None:
        stream = self.remote.remote(attempt.run, attempt.index, attempt.total, *self.args)
        self.streams[stream] = attempt


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
    for minutes); 'auto' and 'local' are Ray's to resolve."""
    if address in ("auto", "local"):
        return
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


@contextlib.contextmanager
def _ray_output_to(path: str | None):
    """Sends what Ray writes during the block to the file `path`: its Python loggers write to
    whatever sys.stderr is, its driver's listener prints the cluster's error messages (a node
    marked dead, ...) to whatever sys.stdout is, its C++ core worker writes to file descriptor
    2. The sweep's lines go to the `out` it took before the block, and its errors are printed
    after the block, so neither is caught."""
    if path is None:
        yield
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a", buffering=1) as log:
        log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n")
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


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


def _follow(ray, tasks: _Tasks, counts: dict, out) -> None:
    """Prints the tasks' lines as they come and counts their outcomes until all have ended;
    on Ctrl-C cancels them (each stops its train.py with SIGTERM, which checkpoints) and lets
    the KeyboardInterrupt on to the caller, which says how to resume."""
    try:
        while tasks.streams:
            ready, _ = ray.wait(list(tasks.streams), num_returns=1, timeout=1.0)
            for stream in ready:
                _take(ray, stream, tasks, counts, out)
    except KeyboardInterrupt:
        _cancel(ray, tasks.streams)
        raise


def _take(ray, stream, tasks: _Tasks, counts: dict, out) -> None:
    """Handles a task's next item: a progress line, its run's outcome, its end or its loss."""
    attempt = tasks.streams[stream]
    try:
        kind, value = ray.get(next(stream))
    except StopIteration:
        del tasks.streams[stream]
        return
    except ray.exceptions.RayError as e:
        del tasks.streams[stream]
        if not _lost(ray, e):
            _fail(attempt, e, counts, out)
        elif attempt.retry < MAX_RETRIES:
            _retry(attempt, e, tasks, out)
        else:
            _give_up(attempt, e, counts, out)
        return
    if kind == "line":
        attempt.started = True
        print(value, file=out, flush=True)
    else:
        counts[value] += 1


def _lost(ray, error: BaseException) -> bool:
    """Whether the task died with its node, worker or objects: nothing its run did (a run's
    own failure ends its task normally, with the outcome 'failed' or 'diverged')."""
    kinds = ray.exceptions
    lost = (
        kinds.NodeDiedError,
        kinds.WorkerCrashedError,
        kinds.RayActorError,
        kinds.ObjectLostError,
        kinds.LocalRayletDiedError,
    )
    return isinstance(error, lost) and not isinstance(error, kinds.RayTaskError)


def _retry(attempt: _Attempt, error: BaseException, tasks: _Tasks, out) -> None:
    """Submits a lost run again; says where it starts from, and records it as lost until its
    next attempt records its progress."""
    start = _restart_point(attempt)
    reason = _first_sentence(error)
    write_status(attempt.run, status="lost", error=f"lost on Ray: {reason}")
    again = dataclasses.replace(attempt, retry=attempt.retry + 1, started=False)
    print(
        f"{attempt.tag}: lost on Ray ({reason}); retry {again.retry} of {MAX_RETRIES}: {start}",
        file=out,
        flush=True,
    )
    tasks.submit(again)


def _restart_point(attempt: _Attempt) -> str:
    """Where a lost run's next attempt starts, from what the driver sees of its directory."""
    run = attempt.run
    if attempt.started and not os.path.isdir(run.workdir):
        return (
            f"{run.workdir} is not on a filesystem this machine shares, so on another node "
            f"it restarts from scratch"
        )
    if was_trained(run):
        return "its training had ended, it evaluates again"
    step = checkpoint_step(run.workdir)
    if step:
        return f"it resumes from its checkpoint at step {step}"
    return "it had no checkpoint yet, it starts from step 0"


def _give_up(attempt: _Attempt, error: BaseException, counts: dict, out) -> None:
    """A run lost MAX_RETRIES + 1 times: recorded as lost (not failed), so the next
    invocation of the sweep runs it again."""
    reason = _first_sentence(error)
    write_status(attempt.run, status="lost", error=f"lost on Ray: {reason}")
    counts["lost"] += 1
    print(
        f"{attempt.tag}: LOST on Ray {MAX_RETRIES + 1} times, the last: {reason}; rerun the "
        f"same command to resume it",
        file=out,
        flush=True,
    )


def _fail(attempt: _Attempt, error: BaseException, counts: dict, out) -> None:
    """A task that ended in any other error of Ray's (its own code raised, as where a node
    cannot enter the sweep's directory; Ray's memory monitor killed it): recorded as failed
    in phase 'ray', as a run's own failure is, not retried."""
    text = _one_line(error)
    write_status(attempt.run, status="failed", phase="ray", error=text)
    counts["failed"] += 1
    print(f"{attempt.tag}: FAILED on Ray: {text}", file=out, flush=True)


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


def _first_sentence(error: BaseException) -> str:
    """`_one_line` up to its first full stop: Ray's loss errors go on about node ids."""
    return _one_line(error).split(". ")[0].removesuffix(".")


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
