#!/usr/bin/env bash
# The GPU side by side in one device call of under 8 minutes on one GPU, then its table:
#   - this project's train step at Transformer-base and -big sizes (configs/bench_base.py,
#     configs/bench_big.py; bfloat16, cuDNN attention, batch 256 x (64 + 64) tokens);
#   - Hugging Face MarianMT at the same sizes under torch.compile and eagerly
#     (benchmarks/compare_torch.py --device cuda --bf16 [--compile]);
#   - decoding at both sizes (ours; generate() at base size);
#   - a jax.profiler trace of a few big-size steps reduced to device time by kind
#     (benchmarks/experiments/profile_step.py, profile_kinds.py);
#   - A/B arms of the big step: threefry dropout bits, Q/K/V in one product, the output
#     projection in bfloat16 with float32 sums, no dropout, XLA attention;
#   - a second round of the four train runs (ours and compiled MarianMT, both sizes), so the
#     table's medians and round-by-round ratios cover two alternating rounds;
#   - benchmarks/table.py over every file, into OUT_DIR/table.md.
#
#   benchmarks/gpu_side_by_side.sh [--dry_run] [OUT_DIR]
#
# Runs go in priority order and each is a fresh process writing OUT_DIR/<name>.jsonl (its
# stderr in <name>.err). Before each it checks the clock: once BUDGET_S seconds (default 390)
# have passed since the start, the remaining runs are skipped and listed in
# OUT_DIR/skipped.txt; a run still going at HARD_S seconds (default 465) is stopped there
# (its finished figures kept, the cut noted in skipped.txt), so the call ends inside 8
# minutes with every finished file kept. A run that fails leaves its .err and the others
# still run (the script then exits 1).
# ONLY (space-separated run names, e.g. "jax_big_threefry jax_big_fused_qkv") runs just those,
# so a second device call can take what the first one's budget skipped.
# OUT_DIR defaults to $OUT, else benchmarks/results/gpu.
#
# The GPU image lacks some of the project's dependencies: they are installed from the wheels
# in $WHEELS (default .gpu_wheels, a folder .gitignore keeps out of git, to be named in the
# device call's `carry`), offline, into a temporary site directory. Make the folder with
#   cp -r ../shared/gpu/wheels .gpu_wheels
# or, for other versions, `pip download --no-deps --only-binary=:all: --python-version 3.12
# --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64
# -d .gpu_wheels NAME==VERSION` for ml-collections, tensorflow-datasets, grain, array-record,
# tensorboardX and their dependencies (../shared/gpu/README.md lists them).
#
# MFU is against the chip's published dense bfloat16 peak: PEAK_TFLOPS, or by device kind
# (H100/H200 SXM 989.5, A100 312); otherwise the measured matmul peak.
#
# --dry_run runs the same commands on the CPU with tiny models (a config written into
# OUT_DIR), 2 timed steps, XLA attention (cuDNN has no CPU kernel) and one round: what
# tests/test_benchmarks.py runs. Without PyTorch installed the MarianMT runs are skipped.
set -euo pipefail

cd "$(dirname "$0")/.."
DRY_RUN=0
if [[ "${1:-}" == "--dry_run" ]]; then
    DRY_RUN=1
    shift
fi
OUT_DIR="${1:-${OUT:-benchmarks/results/gpu}}"
PYTHON="${PYTHON:-python3}"
WHEELS="${WHEELS:-.gpu_wheels}"
BUDGET_S="${BUDGET_S:-390}"
HARD_S="${HARD_S:-465}"
START_S=$(date +%s)
mkdir -p "$OUT_DIR"
: > "$OUT_DIR/skipped.txt"
export PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_compilation_cache}"

install_missing() {
    # Python modules the benchmarks import that this interpreter lacks, from $WHEELS.
    local missing site
    missing=$("$PYTHON" - <<'EOF'
import importlib.util
names = ["absl", "ml_collections", "flax", "optax", "orbax.checkpoint", "sentencepiece",
         "sacrebleu", "numpy", "etils", "tensorflow_datasets", "grain", "array_record",
         "tensorboardX"]
print(" ".join(n for n in names if importlib.util.find_spec(n.split(".")[0]) is None))
EOF
)
    if [[ -z "$missing" ]]; then
        return
    fi
    if ! ls "$WHEELS"/*.whl > /dev/null 2>&1; then
        echo "error: missing Python modules: $missing; put their wheels in $WHEELS" \
             "(see this script's header)" >&2
        exit 2
    fi
    site="$("$PYTHON" -c 'import tempfile; print(tempfile.gettempdir())')/site"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$WHEELS"/*.whl
    export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
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

write_dry_run_configs() {
    # Tiny stand-ins for the two sizes, so the dry run exercises every command in seconds.
    local size width
    for size in base big; do
        width=$([[ $size == base ]] && echo 32 || echo 64)
        cat > "$OUT_DIR/dry_run_$size.py" <<EOF
"""Dry run of benchmarks/gpu_side_by_side.sh: a tiny stand-in for configs/bench_$size.py."""
from pathlib import Path

from transformer import load_config_file


def get_config():
    config = load_config_file(Path("configs/bench_$size.py").resolve())
    m = config.model
    m.d_model, m.num_heads, m.d_ff, m.vocab_size, m.max_len = $width, 4, 2 * $width, 200, 32
    m.num_encoder_layers = m.num_decoder_layers = 1
    config.data.max_source_len = config.data.max_target_len = 8
    config.train.batch_size = config.decode.batch_size = 4
    return config
EOF
    done
}

install_missing
if [[ $DRY_RUN == 1 ]]; then
    export JAX_PLATFORMS=cpu
    write_dry_run_configs
    BASE="$OUT_DIR/dry_run_base.py"
    BIG="$OUT_DIR/dry_run_big.py"
    ATTENTION=xla
    DEVICE=cpu
    OURS_SIZE=(--steps=2 --decode_lengths=8 --matmul_sizes=64)
    PEER_SIZE=(--steps 2 --warmup 1 --decode-lengths 8 --decode-repeats 1)
    PROFILE_STEPS=1
    BATCH=4
    ROUNDS=1
else
    BASE=configs/bench_base.py
    BIG=configs/bench_big.py
    ATTENTION=cudnn
    DEVICE=cuda
    OURS_SIZE=(--steps=20 --decode_lengths=64 --decode_repeats=3 --matmul_sizes=4096)
    PEER_SIZE=(--steps 20 --decode-lengths 64 --decode-repeats 3)
    PROFILE_STEPS=5
    BATCH=256
    ROUNDS=2
fi

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi 2>/dev/null || echo "nvidia-smi: not available"
    "$PYTHON" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__,
        jax.default_backend(), jax.devices())'
    "$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__,
        "transformers", transformers.__version__, "cuda", torch.cuda.is_available())' \
        2>/dev/null || echo "torch: not installed"
    git rev-parse HEAD 2>/dev/null || true
} > "$OUT_DIR/setup.txt" 2>&1

HAVE_TORCH=1
"$PYTHON" -c 'import torch, transformers' 2>/dev/null || HAVE_TORCH=0
PEAK=$([[ $DRY_RUN == 1 ]] || peak_tflops)
# The accelerator settings of this project's runs (after --config, which absl reads first).
OURS_FLAGS=(--json --nocache_lengths= --config.model.dtype=bfloat16
            --config.model.attention_impl=$ATTENTION --config.train.batch_size=$BATCH
            "${OURS_SIZE[@]}")
[[ -n "$PEAK" ]] && OURS_FLAGS+=(--peak_tflops="$PEAK")
PEER=(-m benchmarks.compare_torch --json --device $DEVICE --bf16 --batch $BATCH "${PEER_SIZE[@]}")

FAILED=0
run() {  # run NAME ARGS...: `$PYTHON ARGS` into OUT_DIR/NAME.jsonl, unless out of time
    local name=$1 elapsed
    shift
    if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then
        return 0
    fi
    elapsed=$(( $(date +%s) - START_S ))
    if (( elapsed >= BUDGET_S || elapsed >= HARD_S )); then
        echo "$name (skipped at ${elapsed} s: budget ${BUDGET_S} s)" >> "$OUT_DIR/skipped.txt"
        echo "== $name: skipped (${elapsed} s of ${BUDGET_S} s spent)" >&2
        return 0
    fi
    echo "== [${elapsed} s] $name: $PYTHON $*" >&2
    local rc=0
    timeout "$(( HARD_S - elapsed ))" "$PYTHON" "$@" > "$OUT_DIR/$name.jsonl" \
        2> "$OUT_DIR/$name.err" || rc=$?
    if (( rc == 124 )); then
        echo "$name (cut at ${HARD_S} s)" >> "$OUT_DIR/skipped.txt"
        echo "== $name: cut at ${HARD_S} s" >&2
    elif (( rc != 0 )); then
        echo "error: $name failed; see $OUT_DIR/$name.err" >&2
        tail -3 "$OUT_DIR/$name.err" >&2
        FAILED=1
    fi
}

ours() {  # ours NAME CONFIG ARGS...: benchmarks/throughput.py on CONFIG
    local name=$1 config=$2
    shift 2
    run "$name" -m benchmarks.throughput --config="$config" "${OURS_FLAGS[@]}" "$@"
}

peer() {  # peer NAME ARGS...: a MarianMT run, skipped where PyTorch is not installed
    if [[ -n "${ONLY:-}" && " $ONLY " != *" $1 "* ]]; then
        return 0
    fi
    if (( HAVE_TORCH )); then
        run "$@"
    else
        echo "$1 (skipped: PyTorch and transformers are not installed)" >> "$OUT_DIR/skipped.txt"
    fi
}

train_round() {  # train_round K: ours and compiled MarianMT at both sizes, alternating
    local k=$1 what=train
    (( k == 1 )) && what=train,decode
    ours "jax_big_$k" "$BIG" --what=$what --size_label=big
    peer "torch_compiled_big_$k" "${PEER[@]}" --config "$BIG" --compile --what train \
        --size_label big
    ours "jax_base_$k" "$BASE" --what=$what --size_label=base
    peer "torch_compiled_base_$k" "${PEER[@]}" --config "$BASE" --compile --what train \
        --size_label base
}

train_round 1
run profile_big -m benchmarks.experiments.profile_step --config="$BIG" --json \
    --config.model.dtype=bfloat16 --config.model.attention_impl=$ATTENTION \
    --config.train.batch_size=$BATCH --steps=$PROFILE_STEPS --top=30 \
    --trace_dir="${TMPDIR:-/tmp}/gpu_side_by_side_trace"
peer torch_eager_base "${PEER[@]}" --config "$BASE" --what train,decode --size_label base
peer torch_eager_big "${PEER[@]}" --config "$BIG" --what train --size_label big
# A/B arms of the big train step: each changes one setting of jax_big.
ours jax_big_threefry "$BIG" --what=train --size_label=big-threefry \
    --config.train.dropout_bits=threefry
ours jax_big_fused_qkv "$BIG" --what=train --size_label=big-fused-qkv \
    --config.train.fused_qkv=True
ours jax_big_bf16_logits "$BIG" --what=train --size_label=big-bf16-logits \
    --config.model.logits_dtype=compute
ours jax_big_nodropout "$BIG" --what=train --size_label=big-nodropout \
    --config.model.dropout_rate=0
ours jax_big_xla "$BIG" --what=train --size_label=big-xla-attention \
    --config.model.attention_impl=xla
for (( k = 2; k <= ROUNDS; k++ )); do
    train_round "$k"
done

# Only files with figures enter the table (a skipped or failed run leaves none).
mapfile -t files < <(grep -l '"figure"' "$OUT_DIR"/*.jsonl 2>/dev/null || true)
if (( ${#files[@]} )); then
    "$PYTHON" -m benchmarks.table "${files[@]}" > "$OUT_DIR/table.md" || FAILED=1
    cat "$OUT_DIR/table.md"
fi
echo "wrote $OUT_DIR ($(( $(date +%s) - START_S )) s)" >&2
exit $FAILED
