"""A jax.profiler trace of compiled calls reduced to device time by kind of work.

`parse_hlo(text)` reads the compiled HLO module (`compiled.as_text()`): each instruction's
opcode, custom-call target, the JAX op_name of its metadata (which carries the model's name
scopes: dropout, norm, attention, loss, optimizer_update) and, for a fusion, the same of the
instructions it fused, plus whether it lies in a while loop's body. `classify(op, kernel)`
gives each instruction one of KINDS, the first that applies:

  matrix products        dot / convolution, cuBLAS custom calls, fusions around a dot (Triton
                         GEMM fusions on GPUs, XLA CPU's ynn fusions)
  attention kernels      cuDNN's fused attention, and the softmax and masks of the einsum
                         attention (the `attention` scope, not its products)
  dropout random bits    anything holding the `dropout` scope's ops or a random-bit
                         generator (threefry rounds, RngBitGenerator), masks applied included
  optimizer update       the `optimizer_update` scope (gradient scaling, AdamW, clipping)
  norms and reductions   the `norm` and `loss` scopes, reduce ops and reduction fusions
  copies and transposes  copy / transpose ops and fusions, device memory copies
  elementwise fusions    the rest

`trace_events(trace)` picks the events that are device work from a Chrome/Perfetto trace: on a
GPU the kernels on the device's stream lines (each names its HLO instruction in args.hlo_op),
on the CPU the op events named after HLO instructions. `kind_times(events, ops, calls)` sums
them per kind per call and adds `idle gaps`: the time inside the device's busy span that no
kernel covers (the launch gaps between kernels), on devices with stream lines.
"""

from __future__ import annotations

import collections
import dataclasses
import re

KINDS = (
    "matrix products",
    "attention kernels",
    "dropout random bits",
    "optimizer update",
    "norms and reductions",
    "copies and transposes",
    "elementwise fusions",
)
IDLE = "idle gaps"
MATMUL, ATTENTION, RANDOM, OPTIMIZER, REDUCTION, COPY, ELEMENTWISE = KINDS

# Trace lines a profiler derives from the kernels (per-op, per-module and per-step summaries):
# counting them with the kernels would count the time twice.
DERIVED_LINES = {
    "XLA Modules",
    "XLA Ops",
    "XLA TraceMe",
    "Framework Ops",
    "Framework Name Scope",
    "TensorFlow Ops",
    "TensorFlow Name Scope",
    "Source code",
    "Steps",
    "Launch Stats",
}
# Host-side runtime events of XLA's CPU backend (not ops).
CPU_RUNTIME_EVENTS = ("ThunkExecutor", "$", "PjitFunction", "Slinky", "CommonPjRt", "Thunk")
GEMM_KERNEL = re.compile(r"gemm|nvjet|cutlass|xmma|cublas|ynn", re.IGNORECASE)
ATTENTION_KERNEL = re.compile(r"fmha|flash|sdpa", re.IGNORECASE)
COPY_KERNEL = re.compile(r"^(memcpy|memset|copy|transpose)", re.IGNORECASE)
RANDOM_OPCODES = {"rng-bit-generator", "rng", "rng-get-and-update-state"}


@dataclasses.dataclass
class HloOp:
    """What profiles need of one compiled HLO instruction."""

    name: str
    shape: str
    opcode: str
    line: str  # its whole line: custom-call target, fusion kind, backend config
    op_name: str  # the JAX op_name metadata ('' when absent)
    computation: str = ""  # the computation it lies in
    fused: list[HloOp] = dataclasses.field(default_factory=list)  # a fusion's instructions
    in_loop: bool = False  # in a while loop's body or a computation such a body calls


INSTRUCTION = re.compile(r"\s*(?:ROOT )?%([\w.\-]+) = (\([^=]*?\)|\S+) ([\w\-]+)\(")
HEADER = re.compile(r"(?:ENTRY )?%([\w.\-]+) .*\{\s*$")
CALLEES = re.compile(
    r"(?:calls|to_apply|branch_computations|true_computation|false_computation|body|"
    r"condition)=(\{[^}]*\}|%[\w.\-]+)"
)


def parse_hlo(hlo_text: str) -> dict[str, HloOp]:
    """{instruction name: HloOp} of a compiled module's text, fusions holding the
    instructions of the computation they call."""
    ops: dict[str, HloOp] = {}
    by_computation: dict[str, list[HloOp]] = collections.defaultdict(list)
    calls: dict[str, set[str]] = collections.defaultdict(set)
    bodies: set[str] = set()
    computation = ""
    for line in hlo_text.splitlines():
        header = HEADER.match(line)
        if header and not line.startswith(" "):
            computation = header.group(1)
            continue
        bodies.update(re.findall(r"body=%([\w.\-]+)", line))
        for callees in CALLEES.findall(line):
            calls[computation].update(re.findall(r"%([\w.\-]+)", callees))
        match = INSTRUCTION.match(line)
        if not match:
            continue
        name, shape, opcode = match.groups()
        op_name = re.search(r'op_name="([^"]*)"', line)
        op = HloOp(name, shape, opcode, line, op_name.group(1) if op_name else "", computation)
        ops[name] = op
        by_computation[computation].append(op)
    for op in ops.values():
        if op.opcode == "fusion":
            for callee in calls_of(op.line):
                op.fused.extend(by_computation.get(callee, []))
    looped = _reachable(bodies, calls)
    for op in ops.values():
        op.in_loop = op.computation in looped
    return ops


def calls_of(line: str) -> list[str]:
    return [name for group in CALLEES.findall(line) for name in re.findall(r"%([\w.\-]+)", group)]


def _reachable(roots: set[str], calls: dict[str, set[str]]) -> set[str]:
    seen, frontier = set(roots), list(roots)
    while frontier:
        for callee in calls[frontier.pop()] - seen:
            seen.add(callee)
            frontier.append(callee)
    return seen


def scopes(op_name: str) -> set[str]:
    """The name components of a JAX op_name ('jit(f)/transpose(jvp(main))/norm/mul' ->
    {'jit', 'f', 'transpose', 'jvp', 'main', 'norm', 'mul'})."""
    return {part for part in re.split(r"[/()]", op_name) if part}


def _all(op: HloOp) -> list[HloOp]:
    return [op, *op.fused]


def _is_matmul(op: HloOp) -> bool:
    for inner in _all(op):
        if inner.opcode in ("dot", "convolution") or "__ynn_fusion" in inner.line:
            return True
        if inner.opcode == "custom-call" and re.search(r"gemm|matmul|cublas", inner.line):
            return True
    return "__triton_gemm" in op.line or "__cublas" in op.line


def _is_attention(op: HloOp) -> bool:
    if re.search(r'custom_call_target="[^"]*fmha', op.line) or "__cudnn$fmha" in op.line:
        return True
    return "attention" in scopes(op.op_name)


def _is_random(op: HloOp) -> bool:
    for inner in _all(op):
        names = scopes(inner.op_name)
        if inner.opcode in RANDOM_OPCODES or "dropout" in names or "threefry2x32" in names:
            return True
    return False


def _in_scope(op: HloOp, scope: str) -> bool:
    return any(scope in scopes(inner.op_name) for inner in _all(op))


def _is_reduction(op: HloOp) -> bool:
    if _in_scope(op, "norm") or _in_scope(op, "loss"):
        return True
    return any(inner.opcode == "reduce" for inner in _all(op)) or "kind=kInput" in op.line


def _is_copy(op: HloOp) -> bool:
    if op.opcode in ("copy", "transpose", "copy-start", "copy-done"):
        return True
    if op.opcode == "fusion" and re.match(r"(copy|transpose)", op.name):
        return True
    inner = [i for i in op.fused if i.opcode != "parameter"]
    return bool(inner) and all(i.opcode in ("copy", "transpose", "bitcast") for i in inner)


def classify(op: HloOp | None, kernel: str = "") -> str:
    """The KINDS entry of an instruction (None: unknown to the module, classified by its
    kernel's name alone)."""
    if op is None:
        if ATTENTION_KERNEL.search(kernel):
            return ATTENTION
        if GEMM_KERNEL.search(kernel):
            return MATMUL
        return COPY if COPY_KERNEL.match(kernel) else ELEMENTWISE
    if _is_matmul(op) or (not op.fused and GEMM_KERNEL.search(kernel)):
        return MATMUL
    if _is_attention(op) or ATTENTION_KERNEL.search(kernel):
        return ATTENTION
    if _is_random(op):
        return RANDOM
    if _in_scope(op, "optimizer_update"):
        return OPTIMIZER
    if _is_reduction(op):
        return REDUCTION
    if _is_copy(op) or COPY_KERNEL.match(kernel):
        return COPY
    return ELEMENTWISE


@dataclasses.dataclass(frozen=True)
class Event:
    """One piece of device work in a trace: its HLO instruction, kernel name and interval
    (microseconds)."""

    hlo_op: str
    kernel: str
    start: float
    duration: float


def trace_events(trace: dict, hlo_ops: dict[str, HloOp]) -> tuple[list[Event], bool]:
    """(device work events, whether they come from a device's stream lines). An
    accelerator's kernels where the trace has a '/device:GPU' (or TPU) process, else the
    CPU's op events (names of compiled instructions)."""
    events = trace["traceEvents"]
    processes, threads = {}, {}
    for event in events:
        if event.get("ph") != "M":
            continue
        name = (event.get("args") or {}).get("name", "")
        if event.get("name") == "process_name":
            processes[event.get("pid")] = name
        elif event.get("name") == "thread_name":
            threads[(event.get("pid"), event.get("tid"))] = name
    devices = {pid for pid, name in processes.items() if re.search(r"/device:(GPU|TPU)", name)}
    if devices:
        return _device_events(events, devices, threads), True
    return _cpu_events(events, hlo_ops), False


def _device_events(events, devices: set, threads: dict) -> list[Event]:
    streams = {
        key for key, name in threads.items() if key[0] in devices and name.startswith("Stream")
    }
    out = []
    for event in events:
        key = (event.get("pid"), event.get("tid"))
        if event.get("ph") != "X" or key[0] not in devices:
            continue
        if streams and key not in streams:
            continue
        if not streams and threads.get(key, "") in DERIVED_LINES:
            continue
        args = event.get("args") or {}
        name = event.get("name", "")
        hlo_op = args.get("hlo_op", name)
        out.append(Event(hlo_op, name, float(event["ts"]), float(event.get("dur", 0))))
    return out


def _cpu_events(events, hlo_ops: dict[str, HloOp]) -> list[Event]:
    out = []
    for event in events:
        name = event.get("name", "")
        if event.get("ph") != "X" or name.startswith(CPU_RUNTIME_EVENTS) or name not in hlo_ops:
            continue
        out.append(Event(name, name, float(event["ts"]), float(event.get("dur", 0))))
    return out


def busy_time(events: list[Event]) -> tuple[float, float]:
    """(span from the first start to the last end, time covered by at least one event)."""
    intervals = sorted((e.start, e.start + e.duration) for e in events)
    if not intervals:
        return 0.0, 0.0
    covered, (start, end) = 0.0, intervals[0]
    for lo, hi in intervals[1:]:
        if lo > end:
            covered += end - start
            start, end = lo, hi
        else:
            end = max(end, hi)
    covered += end - start
    return intervals[-1][1] - intervals[0][0], covered


def kind_times(
    events: list[Event], hlo_ops: dict[str, HloOp], calls: int, streams: bool
) -> dict[str, float]:
    """Milliseconds per call of each kind (KINDS order, kinds with no time left out), plus
    IDLE (span minus covered time) when the events come from device streams."""
    totals: collections.Counter = collections.Counter()
    for event in events:
        totals[classify(hlo_ops.get(event.hlo_op), event.kernel)] += event.duration
    out = {kind: totals[kind] / calls / 1e3 for kind in KINDS if totals[kind]}
    if streams:
        span, covered = busy_time(events)
        out[IDLE] = max(span - covered, 0.0) / calls / 1e3
    return out


def op_times(events: list[Event], calls: int) -> dict[str, float]:
    """Milliseconds per call of each HLO instruction."""
    totals: collections.Counter = collections.Counter()
    for event in events:
        totals[event.hlo_op] += event.duration
    return {name: us / calls / 1e3 for name, us in totals.items()}
