"""What checkpoint manifests cost: the time their checksums add to a save and to a restore.

For each config, builds the train state a checkpoint holds (parameters and Adam moments,
initialised, not trained), saves it with the Checkpointer as train.py does, and times:

  save_blocking_s    what the training loop waits for: Checkpointer.save until it returns
  save_s             the whole asynchronous save (save + wait), its manifest included
  manifest_write_s   checkpoint_manifest.write on the saved step: the hashing a save adds,
                     run in Orbax's save thread, so save_blocking_s does not contain it
  restore_s          Checkpointer.restore of the step (a fresh reader), its check included
  manifest_verify_s  checkpoint_manifest.verify of the step: what a restore adds
  checkpoint_mb      the step's size on disk

and, once, the throughput of the candidate checksums on 256 MiB in memory (crc32, sha256,
blake2b: the module docstring of transformer/training/checkpoint_manifest.py says why crc32).
Each figure is the median of --repeats saves or restores; the files are read right after
they were written, from the page cache, as a resume on the same machine would.

Command:   python -m benchmarks.checkpoint_checksums [--configs default,bench_base]
               [--repeats 3] [--json] [--dir DIR]
Dry run:   python -m benchmarks.checkpoint_checksums --dry_run   (a tiny model, one repeat,
           a 4 MiB buffer: what tests/test_checkpoint_manifest.py runs)
Expected:  manifest_write_s and manifest_verify_s well under save_s and restore_s; no target.
Run time:  about a minute on 2 CPU cores (Transformer-base's state is about 0.6 GB).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
import zlib

from benchmarks.common import busy, emit

IMPL = "jax-transformer"
CONFIGS = ("default", "bench_base")
CHECKSUMS = {
    "crc32": lambda data: zlib.crc32(data),
    "sha256": lambda data: hashlib.sha256(data).digest(),
    "blake2b": lambda data: hashlib.blake2b(data).digest(),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help="configs/NAME.py, comma-separated"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="saves and restores timed per config"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    parser.add_argument("--dir", help="where to write the checkpoints (default: a temporary dir)")
    parser.add_argument("--dry_run", action="store_true", help="a tiny model, one repeat")
    return parser


def _config(name: str, dry_run: bool):
    """configs/<name>.py with the model's vocabulary size set (a run takes it from its
    tokenizer); in a dry run shrunk to a 1+1-layer, d_model 32 model."""
    from transformer.training.run_config import load_config_file

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = load_config_file(os.path.join(root, "configs", f"{name}.py"))
    if config.model.vocab_size is None:
        config.model.vocab_size = config.data.vocab_size
    if dry_run:
        m = config.model
        m.d_model, m.num_heads, m.d_ff, m.vocab_size = 32, 4, 64, 200
        m.num_encoder_layers = m.num_decoder_layers = 1
    return config


def _train_state(config):
    """(state dict as a checkpoint holds it, its shapes for a restore)."""
    import jax

    from transformer.training import run_config
    from transformer.training.optim import make_optimizer
    from transformer.training.run_state import abstract_train_state, build_model, state_dict
    from transformer.training.steps import init_state

    model_cfg = run_config.validate(config).model
    optimizer = make_optimizer(config.train)[0]
    state = state_dict(init_state(build_model(model_cfg, 0), optimizer)[1])
    abstract = state_dict(abstract_train_state(model_cfg, optimizer))
    return jax.block_until_ready(state), abstract


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _dir_mb(path: str) -> float:
    sizes = (os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(path) for f in files)
    return sum(sizes) / 1e6


def measure(name: str, workdir: str, repeats: int, dry_run: bool) -> dict[str, float]:
    """Median seconds of each figure over `repeats` saves (steps 1..repeats) and restores."""
    import jax

    from transformer.training import checkpoint_manifest
    from transformer.training.checkpoint import Checkpointer

    state, abstract = _train_state(_config(name, dry_run))
    writer = Checkpointer(workdir, keep=repeats)
    times: dict[str, list[float]] = {}
    for step in range(1, repeats + 1):
        blocking = _time(lambda s=step: writer.save(s, state, {}, {"step": s}, None))
        total = blocking + _time(writer.wait)
        step_dir = os.path.join(writer.directory, str(step))
        write = _time(lambda d=step_dir: checkpoint_manifest.write(d))
        times.setdefault("save_blocking_s", []).append(blocking)
        times.setdefault("save_s", []).append(total)
        times.setdefault("manifest_write_s", []).append(write)
    writer.close()
    for step in range(1, repeats + 1):
        reader = Checkpointer(workdir, read_only=True)  # fresh: its check is not cached
        restore = _time(lambda r=reader, s=step: jax.block_until_ready(r.restore(s, abstract)))
        reader.close()
        step_dir = os.path.join(os.path.abspath(workdir), "checkpoints", str(step))
        verify = _time(lambda d=step_dir: checkpoint_manifest.verify(d))
        times.setdefault("restore_s", []).append(restore)
        times.setdefault("manifest_verify_s", []).append(verify)
    figures = {key: statistics.median(values) for key, values in times.items()}
    figures["checkpoint_mb"] = _dir_mb(os.path.join(workdir, "checkpoints", "1"))
    return figures


def checksum_throughput(size: int) -> dict[str, float]:
    """GB/s of each candidate checksum over `size` random bytes in memory."""
    data = os.urandom(size)
    return {name: size / 1e9 / _time(lambda f=fn: f(data)) for name, fn in CHECKSUMS.items()}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configs = ["default"] if args.dry_run else args.configs.split(",")
    repeats = 1 if args.dry_run else args.repeats
    load = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    if busy(load, cpus):
        print(
            f"note: load average {load:.2f} on {cpus} cores: the machine is busy", file=sys.stderr
        )
    for algorithm, rate in checksum_throughput(4 << 20 if args.dry_run else 256 << 20).items():
        emit(f"{algorithm}_throughput", round(rate, 2), "GB/s", IMPL, args.json)
    for name in configs:
        with tempfile.TemporaryDirectory(dir=args.dir) as workdir:
            figures = measure(name, workdir, repeats, args.dry_run)
        for figure, value in figures.items():
            unit = "MB" if figure.endswith("_mb") else "s"
            emit(figure, round(value, 4), unit, IMPL, args.json, config=name, loadavg_1m=load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
