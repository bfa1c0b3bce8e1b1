#!/usr/bin/env bash
# The CPU benchmarks side by side in one run, then the table with the targets:
#   1. benchmarks/throughput.py: this project's training step, decoding (64 tokens, cached and
#      uncached) and, with DATA, the real-data pipeline figures (configs/bench_base.py), then
#      its decoding again with --int8 (int8 products, bfloat16 encoder output);
#   2. benchmarks/compare_torch.py: Hugging Face MarianMT at the same sizes (the bench extra),
#      and benchmarks/compare_ctranslate2.py: CTranslate2 on our weights, float32 and int8;
#   3. with RUN, benchmarks/real_data_speed.py: a trained Post-LN, sinusoidal run's test split
#      translated by this project and by MarianMTModel holding the same weights;
#   4. benchmarks/table.py over all the files, into OUT_DIR/table.md.
# It runs ROUNDS rounds (default 3) of 1-3, alternating the scripts (A B A B ...), each run a
# fresh process into OUT_DIR/<script>_<round>.jsonl: one process's speed on a shared VM drifts
# by a third between runs, so table.py reports each figure and ratio as the median over the
# rounds with its spread, ratios taken round by round, and a target met only by the whole
# spread. After the rounds, unless LONG=0, one run times greedy decoding at 256 tokens with
# and without the KV cache (the uncached call alone takes minutes), for the 256-token target.
#
#   RUN=studies/.../post_ln/1 DATA=../shared/data/multi30k benchmarks/side_by_side.sh OUT_DIR
#   benchmarks/side_by_side.sh --print OUT_DIR    # the commands, without running them
#
# Before each script it waits until the 1-minute load average is at most
# benchmarks/common.py's MAX_BACKGROUND_LOAD_PER_CORE per core (the threshold table.py uses), so the figures of one script are not taken while the
# previous one's load lingers; after QUIET_WAIT_S seconds (default 600) it goes on, and the
# run's setup line then records the busy start, for which table.py withholds the ratios.
set -euo pipefail

cd "$(dirname "$0")/.."
PRINT_ONLY=0
if [[ "${1:-}" == "--print" ]]; then
    PRINT_ONLY=1
    shift
fi
OUT_DIR="${1:?usage: benchmarks/side_by_side.sh [--print] OUT_DIR}"
PYTHON="${PYTHON:-python}"
QUIET_WAIT_S="${QUIET_WAIT_S:-600}"
ROUNDS="${ROUNDS:-3}"
if ! [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: ROUNDS=$ROUNDS: set it to a whole number of rounds, 1 or more (default 3)" >&2
    exit 2
fi
CPUS=$(nproc)

wait_for_quiet() {
    local waited=0 per_core
    per_core=$("$PYTHON" -c \
        "from benchmarks.common import MAX_BACKGROUND_LOAD_PER_CORE as m; print(m)")
    while awk -v cpus="$CPUS" -v per_core="$per_core" \
            '{ exit !($1 > per_core * cpus) }' /proc/loadavg; do
        if (( waited >= QUIET_WAIT_S )); then
            echo "warning: load average $(cut -d' ' -f1 /proc/loadavg) after ${waited} s;" \
                 "going on (its ratios will be withheld)" >&2
            return 0
        fi
        sleep 5
        waited=$(( waited + 5 ))
    done
}

step() {  # step OUT_FILE COMMAND...: wait for a quiet machine, run, JSON lines into OUT_FILE
    local out="$1"
    shift
    if (( PRINT_ONLY )); then
        echo "$* > $out"
        return 0
    fi
    wait_for_quiet
    echo "[$(date +%H:%M:%S)] $* > $out" >&2
    "$@" > "$out"
}

mkdir -p "$OUT_DIR"
what="train,decode"
data_flag=()
if [[ -n "${DATA:-}" ]]; then
    what="train,pipeline,decode"
    data_flag=("--config.data.path=$DATA")
fi
files=()
for (( round = 1; round <= ROUNDS; round++ )); do
    files+=("$OUT_DIR/jax_$round.jsonl" "$OUT_DIR/jaxint8_$round.jsonl")
    files+=("$OUT_DIR/torch_$round.jsonl" "$OUT_DIR/ct2_$round.jsonl")
    step "$OUT_DIR/jax_$round.jsonl" "$PYTHON" -m benchmarks.throughput \
        --config configs/bench_base.py --what "$what" --decode_lengths 64 \
        --nocache_lengths 64 "${data_flag[@]}" --json
    step "$OUT_DIR/jaxint8_$round.jsonl" "$PYTHON" -m benchmarks.throughput \
        --config configs/bench_base.py --what decode --decode_lengths 64 --nocache_lengths= \
        --int8 --json
    step "$OUT_DIR/torch_$round.jsonl" "$PYTHON" -m benchmarks.compare_torch \
        --decode-lengths 64 --json
    step "$OUT_DIR/ct2_$round.jsonl" "$PYTHON" -m benchmarks.compare_ctranslate2 \
        --decode_lengths 64 --json
    if [[ -n "${RUN:-}" ]]; then
        files+=("$OUT_DIR/real_$round.jsonl")
        step "$OUT_DIR/real_$round.jsonl" "$PYTHON" -m benchmarks.real_data_speed \
            --workdir "$RUN" --split test --what greedy,beam4 --json
    fi
done
if [[ "${LONG:-1}" != 0 ]]; then
    files+=("$OUT_DIR/jax_256.jsonl")
    step "$OUT_DIR/jax_256.jsonl" "$PYTHON" -m benchmarks.throughput \
        --config configs/bench_base.py --what decode --decode_modes greedy \
        --decode_lengths 256 --nocache_lengths 256 --decode_warmup 0 --json
fi
if (( PRINT_ONLY )); then
    echo "$PYTHON -m benchmarks.table ${files[*]} > $OUT_DIR/table.md"
else
    "$PYTHON" -m benchmarks.table "${files[@]}" > "$OUT_DIR/table.md"
    cat "$OUT_DIR/table.md"
fi
