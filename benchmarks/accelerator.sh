#!/usr/bin/env bash
# One-shot accelerator benchmark: benchmarks/throughput.py in bfloat16 with the accelerator
# settings, as JSON lines, in one command of under 8 minutes on one GPU.
#
#   benchmarks/accelerator.sh [--dry_run] [OUT_DIR]
#
# OUT_DIR (default: $OUT, else benchmarks/results) receives:
#   accelerator_setup.txt         nvidia-smi, the JAX version and devices
#   accelerator_cudnn.jsonl       the train step (batch 256 x 64+64 tokens) with
#                                 model.attention_impl=cudnn
#   accelerator_cudnn_decode.jsonl  decoding (greedy, sample, beam 4 at batch 32 x 64 tokens)
#                                 with model.attention_impl=cudnn
#   accelerator_xla.jsonl         train and decode with model.attention_impl=xla (XLA's fusion
#                                 of jax.nn.dot_product_attention), for the kernel's share
#   accelerator_remat.jsonl       the cudnn train step with train.remat=block (device memory
#                                 against step time)
# A run that fails leaves its stderr in accelerator_<name>.err and the others still run (the
# script then exits 1).
# MFU is against the chip's published dense bfloat16 peak: PEAK_TFLOPS, or by device kind
# (H100/H200 SXM 989.5, A100 312); otherwise the measured matmul peak.
#
# JAX must see the GPU. If it does not, the CUDA build is installed: from the wheels in
# $WHEELS (offline, --no-index; e.g. a folder carried to a machine without internet) when set,
# else `pip install -U "jax[cuda12]"` from the package index. $WHEELS also supplies any
# pure-Python dependency the machine lacks (ml_collections, ...), installed into /tmp/site.
#
# --dry_run runs the same commands on the CPU with a tiny model, attention_impl=xla (cuDNN
# has no CPU kernel) and 2 timed steps: what tests/test_benchmarks.py runs.
set -euo pipefail

cd "$(dirname "$0")/.."
DRY_RUN=0
if [[ "${1:-}" == "--dry_run" ]]; then
    DRY_RUN=1
    shift
fi
OUT_DIR="${1:-${OUT:-benchmarks/results}}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1

install_missing() {
    # Python modules the benchmark imports that this interpreter lacks, from $WHEELS.
    local missing
    missing=$("$PYTHON" - <<'EOF'
import importlib.util
names = ["absl", "ml_collections", "flax", "optax", "orbax.checkpoint", "sentencepiece",
         "sacrebleu", "numpy", "etils"]
print(" ".join(n for n in names if importlib.util.find_spec(n.split(".")[0]) is None))
EOF
)
    if [[ -n "$missing" ]]; then
        if [[ -z "${WHEELS:-}" ]]; then
            echo "error: missing Python modules: $missing; set WHEELS to a folder of wheels" >&2
            exit 2
        fi
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/site "$WHEELS"/*.whl
        export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
}

backend() {
    "$PYTHON" -c 'import jax; print(jax.default_backend())' 2>/dev/null || echo none
}

ensure_cuda_jax() {
    if [[ "$(backend)" == "gpu" ]]; then
        return
    fi
    echo "JAX does not see a GPU: installing the CUDA build" >&2
    if [[ -n "${WHEELS:-}" ]]; then
        "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" -U "jax[cuda12]"
    else
        "$PYTHON" -m pip install -q -U "jax[cuda12]"
    fi
    if [[ "$(backend)" != "gpu" ]]; then
        echo "error: JAX still sees no GPU (backend $(backend)); see accelerator_setup.txt" >&2
        exit 2
    fi
}

peak_tflops() {
    if [[ -n "${PEAK_TFLOPS:-}" ]]; then
        echo "$PEAK_TFLOPS"
        return
    fi
    "$PYTHON" - <<'EOF'
import jax
kind = jax.devices()[0].device_kind.upper()
# Published dense bfloat16 tensor-core peaks (TFLOP/s; NVIDIA datasheets, SXM parts).
for name, peak in (("H200", 989.5), ("H100", 989.5), ("A100", 312.0)):
    if name in kind:
        print(peak)
        break
EOF
}

install_missing
if [[ $DRY_RUN == 1 ]]; then
    export JAX_PLATFORMS=cpu
    ATTENTION=xla
    SIZE=(--config.model.num_encoder_layers=1 --config.model.num_decoder_layers=1
          --config.model.d_model=32 --config.model.num_heads=4 --config.model.d_ff=64
          --config.model.vocab_size=200 --config.model.max_len=32
          --config.data.max_source_len=8 --config.data.max_target_len=8
          --config.train.batch_size=4 --config.decode.batch_size=4
          --steps=2 --decode_lengths=8 --matmul_sizes=64)
    TRAIN_BATCH=()
else
    ensure_cuda_jax
    ATTENTION=cudnn
    SIZE=(--steps=20 --decode_lengths=64 --decode_repeats=3)
    TRAIN_BATCH=(--config.train.batch_size=256)
fi

{
    nvidia-smi 2>/dev/null || echo "nvidia-smi: not available"
    "$PYTHON" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__,
        jax.default_backend(), jax.devices())'
} > "$OUT_DIR/accelerator_setup.txt" 2>&1

PEAK=$(peak_tflops)
COMMON=(--config=configs/bench_base.py --config.model.dtype=bfloat16 --json
        --nocache_lengths= "${SIZE[@]}")
[[ -n "$PEAK" ]] && COMMON+=(--peak_tflops="$PEAK")

FAILED=0
bench() {  # bench NAME ARGS...: one throughput.py run into accelerator_NAME.jsonl
    local name=$1
    shift
    echo "== $name: $*" >&2
    if ! "$PYTHON" -m benchmarks.throughput "${COMMON[@]}" "$@" \
            > "$OUT_DIR/accelerator_$name.jsonl" 2> "$OUT_DIR/accelerator_$name.err"; then
        echo "error: $name failed; see $OUT_DIR/accelerator_$name.err" >&2
        tail -3 "$OUT_DIR/accelerator_$name.err" >&2
        FAILED=1
    fi
}

bench cudnn --what=train --config.model.attention_impl=$ATTENTION "${TRAIN_BATCH[@]}"
bench cudnn_decode --what=decode --config.model.attention_impl=$ATTENTION
bench xla --what=train,decode --config.model.attention_impl=xla "${TRAIN_BATCH[@]}"
bench remat --what=train --config.model.attention_impl=$ATTENTION --config.train.remat=block \
    "${TRAIN_BATCH[@]}"
echo "wrote $OUT_DIR/accelerator_*.jsonl" >&2
exit $FAILED
