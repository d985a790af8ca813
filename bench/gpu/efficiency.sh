#!/usr/bin/env bash
# On the device, after install.sh: the measurements of bench/results/h200-efficiency-*.json (issue 30) back to back
# on one machine, as one job that outlives a device call (start it with setsid; poll with `wait`):
#   1. the recipe runs, each 'SHAPE@RECIPE@SETTING' (SETTING is sweep.sh's 'NAME|SERVE FLAGS|RECIPE FLAGS'; the
#      recipe starts its own fleet, so these are the figures a user gets); by default lighton-ocr3-saturate.py,
#      then ovis-ocr2-server.py, with their defaults on PAGES_N (3,072) pages;
#      A run may end in '@TOKENS' (its MAX_TOKENS, e.g. 1 for the front-end-bound arm), and the word `wipe` in
#      place of a run removes the machine's own compile and kernel caches, as a new job finds them (issue 42: the
#      run after it starts from --engine-cache's archive alone);
#   2. fleet_arms.sh's phases (ARMS, one per line): replicas started together, engine settings, and the rate per
#      busy second; by default 3 replicas under CUDA MPS (over 3, then 2 of them) and without it. ARMS=none skips
#      them.
# The recipe runs go first: a cold machine's first start pays the compile caches either way, and the runs that
# meet the issue's targets should not be the ones a short budget leaves out. Each writes into $OUT (default
# /tmp/results); a line per step in $OUT/job.log, with the compile and kernel caches' file counts around each
# step (which cache a start fills tells what its first forward compiled).
#
#   setsid nohup bash bench/gpu/efficiency.sh start [SHAPE@RECIPE@SETTING ...] > /tmp/job.out 2>&1 < /dev/null &
#   bash bench/gpu/efficiency.sh wait 560      # in each later call: waits, then copies the results to $OUT
set -uo pipefail

results=${RESULTS:-/tmp/results}
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = wait ]; then
    for ((i = 0; i < ${2:-560}; i += 5)); do [ -f "$results/DONE" ] && break; sleep 5; done
    cp "$results"/*.json "$results"/*.jsonl "$results"/*.tar.gz "$results"/job.log "${OUT:-/tmp/out}/" 2>/dev/null
    tail -40 "$results/job.log"
    exit 0
fi
mkdir -p "$results"
export OUT=$results BUDGET_S=${BUDGET_S:-3000} ARM_TIMEOUT_S=${ARM_TIMEOUT_S:-600} MIN_LEFT_S=60 PAGES_N=${PAGES_N:-3072}
export PYTHONPATH=$(cd "$here/../.." && pwd)/src${PYTHONPATH:+:$PYTHONPATH}
log() { echo "job [$SECONDS s] $*" >> "$results/job.log"; }
inductor=${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor_$(id -un)}
census() {
    local d
    for d in "$HOME/.triton/cache" "$HOME/.cache/vllm/torch_compile_cache" "$inductor"; do
        printf '%s=%s ' "$d" "$(find "$d" -type f 2>/dev/null | wc -l)"
    done
}
shift
[ $# -gt 0 ] || set -- 'qwen3_5@lighton-ocr3-saturate.py@lighton||--no-canary' 'qwen3_5@ovis-ocr2-server.py@ovis||--no-canary'
log "start; caches: $(census)"
for run in "$@"; do
    if [ "$run" = wipe ]; then
        rm -rf "$HOME/.triton" "$HOME/.cache/vllm" "$HOME/.cache/flashinfer" "$HOME/.nv" "$inductor"
        log "wiped the local caches: $(census)"
        continue
    fi
    IFS=@ read -r shape recipe setting tokens <<<"$run"
    SHAPE=$shape RECIPE=$recipe MAX_TOKENS=${tokens:-${MAX_TOKENS:-800}} bash "$here/sweep.sh" "$setting" \
        >> "$results/job.log" 2>&1
    log "$recipe ($shape) ${setting%%|*}: done; caches: $(census)"
done
arms=${ARMS:-$'mps3|3|1||r3:1024:3,r2:512:2\nnomps3|3|0||r3:1024:3'}
if [ "$arms" != none ]; then
    mapfile -t phases <<<"$arms"
    bash "$here/fleet_arms.sh" "${phases[@]}" >> "$results/job.log" 2>&1
    log "arms: done; caches: $(census)"
fi
touch "$results/DONE"
