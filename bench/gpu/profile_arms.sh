#!/usr/bin/env bash
# On the device, after install.sh: issue 51's measurements as one job that outlives a device call (start it with
# setsid; poll with `wait`), each step logged with its time in $RESULTS/job.log:
#   1. imports: `python -X importtime` of what `vllm serve` and its spawned processes import, on the fresh install
#      (no bytecode: install.sh installs with --no-compile), then how long compiling vLLM ahead (compileall) takes,
#      the same imports again with that bytecode, once more without -X importtime (its own cost), and what the
#      recipe imports before it starts a replica (IMPORT_STUDY=0 leaves this step out);
#   2. fleet_arms.sh phases, one invocation each (PHASES, one per line, fleet_arms' 'NAME|REPLICAS|MPS|FLAGS|RUNS'),
#      the shipped plan's flags plus the phase's; a phase named in IMPORTTIME_PHASES runs every Python process with
#      PYTHONPROFILEIMPORTTIME=1 and its own stderr file (importtime_site/sitecustomize.py); in one named in
#      SPY_START_PHASES, py-spy follows replica 1's start (--subprocesses --idle) for SPY_START_S seconds;
#   3. in the run named PROFILE_RUN (PHASE-RUN), on replica 1 (port 8020): `py-spy record --idle --gil` (and
#      `--idle` alone) of its engine core and busiest API server for PYSPY_S seconds from PYSPY_AT_S after the
#      run starts, then the torch profiler (the phase passes --profiler-config) from /start_profile to
#      /stop_profile PROFILE_S seconds later; trace_summary.py reads the trace after the phase.
# `wait` packs the small results into $OUT (the raw trace stays on the device).
#
#   PYSPY=/tmp/pyspy/py-spy setsid nohup bash bench/gpu/profile_arms.sh start > /tmp/p51.out 2>&1 < /dev/null &
#   bash bench/gpu/profile_arms.sh wait 560
set -uo pipefail

results=${RESULTS:-/tmp/results51}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${BENCH_WORK:-/tmp/bench}
prof_dir=${PROF_DIR:-/tmp/prof51}

if [ "${1:-}" = wait ]; then
    for ((i = 0; i < ${2:-560}; i += 5)); do [ -f "$results/DONE" ] && break; sleep 5; done
    out=${OUT:-/tmp/out}
    mkdir -p "$out"
    tar -C "$results" -czf "$out/results51.tar.gz" --exclude='*.trace.json*' . 2>/dev/null
    cp "$results/job.log" "$out/" 2>/dev/null
    ls -la "$out"
    tail -30 "$results/job.log"
    exit 0
fi

mkdir -p "$results" "$prof_dir"
t0=$SECONDS
log() { echo "job [$((SECONDS - t0)) s, $(date -u +%T)] $*" >> "$results/job.log"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}'; }
site=${SITE:-/tmp/site}
py=${PYTHON:-$(command -v python3)}
pyspy=${PYSPY:-}
# fleet_arms.sh writes its results (fleet-arms.jsonl, the arm logs' tarball) into $OUT: here, not the call's folder.
export OUT=$results BENCH_WORK=$work PAGES_N=${PAGES_N:-2048} BUDGET_S=${BUDGET_S:-1500} ARM_TIMEOUT_S=${ARM_TIMEOUT_S:-600}
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
[ -n "$pyspy" ] && export BENCH_PY_SPY=$pyspy BENCH_PY_SPY_AT=${BENCH_PY_SPY_AT:-40} BENCH_PY_SPY_S=${BENCH_PY_SPY_S:-15}
profile_config='{"profiler":"torch","torch_profiler_dir":"'$prof_dir'","torch_profiler_with_stack":false,"ignore_frontend":true}'
encoder_graphs='{"cudagraph_mm_encoder":true,"encoder_cudagraph_token_budgets":[2976,5952,8928,11904],"encoder_cudagraph_max_vision_items_per_batch":4}'
default_phases="base|3|1|--profiler-config $profile_config|a:1536:3,prof:1024:3
enc|3|1|--compilation-config $encoder_graphs|a:1536:3
encw|3|1|--compilation-config $encoder_graphs|a:1536:3
r2enc|2|1|--compilation-config $encoder_graphs|a:1536:2"
phases=${PHASES:-$default_phases}
profile_run=${PROFILE_RUN:-base-prof}
importtime_phases=" ${IMPORTTIME_PHASES:-base encw} "
spy_start_phases=" ${SPY_START_PHASES:-encw} "

import_study() {  # step 1: the imports of a start, with and without bytecode
    local d=$results/imports mods
    mkdir -p "$d"
    mods="import vllm.entrypoints.cli.main, vllm.entrypoints.cli.serve, vllm.entrypoints.openai.api_server, vllm.v1.engine.core"
    log "imports: .pyc files in the install before: $(find "$site" -name '*.pyc' | wc -l)"
    # The H200 image sets PYTHONDONTWRITEBYTECODE (its spawned processes run `python3 -B`): an import writes no
    # .pyc, so the second run has bytecode only because compileall wrote it in between.
    (cd /tmp
    start=$EPOCHREALTIME
    PYTHONPATH=$site "$py" -X importtime -c "$mods" 2> "$d/imports-nopyc.txt"
    log "imports: without .pyc, with -X importtime: $(since "$start") s wall"
    start=$EPOCHREALTIME
    "$py" -m compileall -q -j 16 "$site/vllm" > /dev/null 2>&1
    log "imports: compileall -j 16 of $site/vllm: $(since "$start") s; .pyc files: $(find "$site" -name '*.pyc' | wc -l)"
    start=$EPOCHREALTIME
    PYTHONPATH=$site "$py" -X importtime -c "$mods" 2> "$d/imports-pyc.txt"
    log "imports: with vLLM's .pyc, with -X importtime: $(since "$start") s wall"
    start=$EPOCHREALTIME
    PYTHONPATH=$site "$py" -c "$mods"
    log "imports: with vLLM's .pyc, without -X importtime: $(since "$start") s wall"
    start=$EPOCHREALTIME
    PYTHONPATH=$site:$root/src "$py" -X importtime "$root/lighton-ocr3-saturate.py" > /dev/null 2> "$d/imports-recipe.txt"
    log "imports: the recipe to its usage: $(since "$start") s wall")
    "$py" "$here/importtime_summary.py" "$d"/imports-*.txt > "$d/summary.json" 2>> "$results/job.log"
}

replica_pids() {  # the engine core and busiest API server of the replica on port $1: "ENGINE API"
    local serve sid
    serve=$(pgrep -f -- "serve .*--port $1" | head -1)
    [ -n "$serve" ] || return 1
    sid=$(ps -o sid= -p "$serve" | tr -d ' ')
    ps -e -o pid=,sid=,comm= | awk -v s="$sid" '$2 == s {print $1, $3}' | while read -r pid comm; do
        echo "$pid $comm $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null)"
    done | awk '$2 ~ /EngineCor/ {e = $1} $2 ~ /APIServe/ && $3 >= best {best = $3; a = $1} END {print e, a}'
}

profile_window() {  # step 3, in the background: py-spy, then the torch profiler, on replica 1 during PROFILE_RUN
    local stdout=$work/arm-logs/$profile_run-stdout.txt d=$results/profile pids engine api
    mkdir -p "$d"
    until [ -f "$stdout" ]; do [ -f "$results/phase-ended" ] && return; sleep 1; done
    log "profile: $profile_run started; py-spy at ${PYSPY_AT_S:-15} s"
    sleep "${PYSPY_AT_S:-15}"
    read -r engine api <<<"$(replica_pids 8020)"
    log "profile: replica 1 engine core $engine, API server $api"
    if [ -n "$pyspy" ] && [ -n "$engine" ]; then
        for target in "enginecore:$engine" "apiserver:$api"; do
            "$pyspy" record --pid "${target#*:}" --duration "${PYSPY_S:-10}" --rate 100 --idle --gil --threads \
                --nonblocking --format raw -o "$d/idle-gil-${target%%:*}.txt" > "$d/idle-gil-${target%%:*}.log" 2>&1 &
            "$pyspy" record --pid "${target#*:}" --duration "${PYSPY_S:-10}" --rate 100 --idle --threads \
                --nonblocking --format raw -o "$d/idle-${target%%:*}.txt" > "$d/idle-${target%%:*}.log" 2>&1 &
        done
        wait
        log "profile: py-spy done"
    fi
    curl -s -m 60 -X POST http://127.0.0.1:8020/start_profile -o /dev/null -w "%{http_code}" > "$d/start.code"
    log "profile: /start_profile answered $(cat "$d/start.code")"
    sleep "${PROFILE_S:-3}"
    curl -s -m 300 -X POST http://127.0.0.1:8020/stop_profile -o /dev/null -w "%{http_code}" > "$d/stop.code"
    log "profile: /stop_profile answered $(cat "$d/stop.code"); files: $(ls "$prof_dir" | tr '\n' ' ')"
}

summarize_traces() {  # trace_summary.py over each trace the profiled replica wrote
    local n=0 trace
    for trace in "$prof_dir"/*.json*; do
        [ -f "$trace" ] || continue
        n=$((n + 1))
        "$py" "$here/trace_summary.py" "$trace" --table "$results/profile/top-kernels-$n.md" \
            > "$results/profile/trace-summary-$n.json" 2>> "$results/job.log"
        log "profile: summarized $(basename "$trace") ($(du -h "$trace" | cut -f1))"
    done
    cp "$prof_dir"/profiler_out_*.txt "$results/profile/" 2>/dev/null
}

spy_start() {  # py-spy of replica 1's start, from the moment its `vllm serve` exists
    local name=$1 serve=""
    until [ -n "$serve" ] || [ -f "$results/phase-ended" ]; do
        serve=$(pgrep -f -- "serve .*--port 8020" | head -1)
        sleep 0.1
    done
    [ -n "$serve" ] || return
    "$pyspy" record --pid "$serve" --subprocesses --idle --threads --nonblocking --rate 50 --duration "${SPY_START_S:-110}" \
        --format raw -o "$results/start-$name.txt" > "$results/start-$name.log" 2>&1
    "$py" "$here/startup_spy.py" "$results/start-$name.txt" --rate 50 > "$results/start-$name-summary.json" 2>> "$results/job.log"
    log "start py-spy ($name): done"
}

log "start: $(nvidia-smi --query-gpu=name,memory.used --format=csv,noheader 2>/dev/null)"
if [ "${IMPORT_STUDY:-1}" = 1 ]; then import_study && log "imports: done"; fi
while IFS= read -r spec; do
    [ -n "$spec" ] || continue
    name=${spec%%|*}
    extra=(env)
    if [[ $importtime_phases == *" $name "* ]]; then
        rm -rf "$results/imports-$name" && mkdir -p "$results/imports-$name"
        extra+=(PYTHONPROFILEIMPORTTIME=1 IMPORTTIME_DIR="$results/imports-$name"
                PYTHONPATH="$here/importtime_site${PYTHONPATH:+:$PYTHONPATH}")
    fi
    # vLLM annotates its model runner's phases (the forward, for the encoder's share) only with this set.
    [ "${profile_run%%-*}" = "$name" ] && extra+=(VLLM_CUSTOM_SCOPES_FOR_PROFILING=1)
    rm -f "$results/phase-ended"
    if [[ $spy_start_phases == *" $name "* ]] && [ -n "$pyspy" ]; then spy_start "$name" & fi
    if [ "${profile_run%%-*}" = "$name" ]; then profile_window & fi
    log "phase $name: start ($spec)"
    "${extra[@]}" bash "$here/fleet_arms.sh" "$spec" >> "$results/job.log" 2>&1 < /dev/null
    log "phase $name: done"
    touch "$results/phase-ended"
    wait
    rm -f "$results/phase-ended"
    if [[ $importtime_phases == *" $name "* ]]; then
        "$py" "$here/importtime_summary.py" "$results/imports-$name"/*.txt > "$results/imports-$name-summary.json" 2>> "$results/job.log"
    fi
    # The trace (hundreds of MB) is read beside the next phase, on one core.
    [ "${profile_run%%-*}" = "$name" ] && summarize_traces &
done <<<"$phases"
wait
touch "$results/DONE"
log "done"
