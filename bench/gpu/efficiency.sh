#!/usr/bin/env bash
# On the device, after install.sh: the measurements of bench/results/h200-efficiency-*.json (issue 30) back to back
# on one machine, as one job that outlives a device call (start it with setsid; poll with `wait`):
#   1. fleet_arms.sh: 3 replicas started together under CUDA MPS (over 3, then 2 of them) and without it;
#   2. lighton-ocr3-saturate.py with its defaults on 3,072 pages (the recipe starts its own fleet);
#   3. ovis-ocr2-server.py with its defaults on the same pages.
# Each writes into $OUT (default /tmp/results); a line per step in $OUT/job.log, with the compile and kernel
# caches' file counts around the recipe runs (which cache a start fills tells what its first forward compiled).
#
#   setsid nohup bash bench/gpu/efficiency.sh start > /tmp/job.out 2>&1 < /dev/null &
#   bash bench/gpu/efficiency.sh wait 560      # in each later call: waits, then copies the results to $OUT
set -uo pipefail

results=${RESULTS:-/tmp/results}
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = wait ]; then
    for ((i = 0; i < ${2:-560}; i += 5)); do [ -f "$results/DONE" ] && break; sleep 5; done
    cp "$results"/*.jsonl "$results"/*.tar.gz "$results"/job.log "${OUT:-/tmp/out}/" 2>/dev/null
    tail -40 "$results/job.log"
    exit 0
fi
mkdir -p "$results"
export OUT=$results BUDGET_S=${BUDGET_S:-3000} ARM_TIMEOUT_S=${ARM_TIMEOUT_S:-600} MIN_LEFT_S=60 PAGES_N=${PAGES_N:-3072}
export PYTHONPATH=$(cd "$here/../.." && pwd)/src${PYTHONPATH:+:$PYTHONPATH}
log() { echo "job [$SECONDS s] $*" >> "$results/job.log"; }
census() {
    local d
    for d in "$HOME/.triton/cache" "$HOME/.cache/vllm/torch_compile_cache" /tmp/torchinductor_root; do
        printf '%s=%s ' "$d" "$(find "$d" -type f 2>/dev/null | wc -l)"
    done
}
log "arms: start; caches: $(census)"
bash "$here/fleet_arms.sh" ${ARMS:-'mps3|3|1||r3:1024:3,r2:512:2' 'nomps3|3|0||r3:1024:3'} >> "$results/job.log" 2>&1
log "arms: done; caches: $(census)"
SHAPE=qwen3_5 bash "$here/sweep.sh" 'lighton||--no-canary' >> "$results/job.log" 2>&1
log "lighton: done; caches: $(census)"
SHAPE=qwen3_5 RECIPE=ovis-ocr2-server.py bash "$here/sweep.sh" 'ovis||--no-canary' >> "$results/job.log" 2>&1
log "ovis: done; caches: $(census)"
touch "$results/DONE"
