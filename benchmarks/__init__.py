"""Speed benchmarks of this project against a PyTorch peer, run from the repository root as
modules (the package sits beside `transformer`, not inside the installed wheel):

    python -m benchmarks.throughput --config configs/bench_base.py  # this project's figures
    python -m benchmarks.compare_torch           # Hugging Face MarianMT at the same sizes
    python -m benchmarks.real_data_speed --workdir RUN  # a trained run, both sides, same weights
    python -m benchmarks.table jax.jsonl torch.jsonl [real.jsonl]  # side by side, with targets
    benchmarks/side_by_side.sh OUT_DIR           # the three benchmarks and the table in one run
    benchmarks/gpu_side_by_side.sh [OUT_DIR]     # the one-call GPU side by side and profile

The other modules are their parts: `common` (figure lines, timing, the busy-machine rule),
`throughput_train`, `throughput_pipeline` and `throughput_decode` (the parts of
`throughput`), `ctranslate2_weights` (one of our runs as a CTranslate2 model; a run as a
MarianMTModel is `transformer.interop.marian`) and `checkpoint_checksums` (what a
checkpoint's checksum manifest adds to a save and a restore). `soak` is no speed benchmark:
it kills a training run with SIGKILL at random moments, resumes it after each, and compares
the end with an uninterrupted run bit for bit (docs/reliability.md). `experiments/`
holds one-off studies (product shapes, A/B runs of decode settings, profiles) with what
each concluded in its README; recorded figures are in `results/`.
"""
