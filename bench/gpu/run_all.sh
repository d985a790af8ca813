#!/usr/bin/env bash
# On the device, after install.sh: runs the bench arms one after another and writes $OUT/results-<arm>.json.
#
#   bash bench/gpu/run_all.sh [ARM ...]          # arms: offline server saturate hand (default: all four)
#
# Each arm OCRs the same N synthetic 1540x2000 JPEG pages (make_pages.py) with a Qwen2.5-VL-3B-shaped model
# loaded with --load-format dummy (make_model.py), every request ignore_eos with max_tokens 800, temperature 0,
# --max-model-len 8192:
#   offline   nanonets-ocr2.py --batch-size 16 (in-process vllm.LLM)
#   server    nanonets-ocr2-server.py (spawns vllm serve; window 32)
#   saturate  lighton-ocr3-saturate.py --model <the Qwen2.5-VL folder> (spawns vllm serve; adaptive window)
#   hand      vllm serve --api-server-count 4 + hand_driver.py, 256 in flight (the reference)
# Each result holds the recipe's JSON summary line, the sustained / billed / inference rates, GPU utilisation
# (nvidia-smi once a second) and MFU over the sustained interval, the GPU memory peak, host-memory peaks of the
# arm's process tree, and the arm's rc / timeout; every arm also goes into $OUT/h200-efficiency-<date>.json
# (efficiency.py). Logs of all arms of this call
# go to $OUT/logs-<arms>.tar.gz (the device returns at most 8 files).
#
# Environment knobs: BUDGET_S (seconds this script may take in all, default 570: it shrinks the last arms'
# timeouts so that the results come back before the call's limit), ARM_TIMEOUT_S (cap per arm, default 330),
# PAGES_N (default 192), MAX_TOKENS (800), MAX_MODEL_LEN (8192), HAND_CONCURRENCY (256), SITE (/tmp/site),
# BENCH_FAKE=1 (plumbing test without a GPU: a fake `vllm serve`; the offline arm is skipped).
set -uo pipefail

source "$(dirname "$0")/env.sh"
logs=$work/logs
mkdir -p "$logs"
model=$work/qwen25vl3b
hand_conc=${HAND_CONCURRENCY:-256}

arms=("$@")
[ ${#arms[@]} -gt 0 ] || arms=(offline server saturate hand)
for arm in "${arms[@]}"; do
    case $arm in offline|server|saturate|hand) ;; *) echo "run_all: unknown arm $arm" >&2; exit 2 ;; esac
done

say() { echo "run_all [$((SECONDS - t0)) s] $*" >&2; }

if [ "${BENCH_FAKE:-0}" != 1 ] && [ ! -d "$site/vllm" ]; then
    say "no vllm in $site: run bench/gpu/install.sh first (a machine that went cold has lost it and the parts)"
    exit 3
fi

install_vllm_shim

[ -f "$model/config.json" ] || "$py" "$here/make_model.py" "$model" >&2 || { say "make_model failed"; exit 1; }
if [ ! -f "$pages/state.json" ]; then
    "$py" "$here/make_pages.py" "$pages" --pages "$n_pages" --workers 12 >&2 || { say "make_pages failed"; exit 1; }
fi
say "model and $n_pages pages ready"

tflop=$(tflop_per_page "$model") || { say "flops.py failed"; exit 1; }
common=(--model "$model" --max-model-len "$max_len" --max-tokens "$max_tokens" --temperature 0 --ignore-eos)
dummy="--extra-serve-args=--load-format dummy"

hand_arm() {
    # vllm serve with 4 API servers in its own session (the monitor ends it if this shell dies), then the driver.
    local port=8003 url=http://127.0.0.1:8003 spid rc i
    setsid vllm serve "$model" --limit-mm-per-prompt '{"image": 1}' --no-enable-prefix-caching \
        --max-model-len "$max_len" --load-format dummy --api-server-count 4 \
        --host 127.0.0.1 --port "$port" > "$logs/hand-serve.log" 2>&1 &
    spid=$!
    trap 'exit 143' TERM
    trap 'kill -TERM -- -$spid 2>/dev/null; for i in $(seq 30); do kill -0 -- -$spid 2>/dev/null || break; sleep 1; done
          kill -KILL -- -$spid 2>/dev/null' EXIT
    for ((i = 0; i < 600; i++)); do
        "$py" -c "import httpx,sys; sys.exit(httpx.get('$url/health', timeout=2).status_code != 200)" 2>/dev/null && break
        kill -0 "$spid" 2>/dev/null || { echo "hand: vllm serve exited" >&2; tail -40 "$logs/hand-serve.log" >&2; return 1; }
        sleep 1
    done
    echo "hand: server healthy after $i s" >&2
    "$py" "$here/hand_driver.py" "$pages" --server "$url" --model "$model" --concurrency "$hand_conc" \
        --max-tokens "$max_tokens" --temperature 0
    rc=$?
    return $rc
}

run_arm() {
    local arm=$1 left timeout cmd
    left=$((budget - (SECONDS - t0) - 25))
    timeout=$arm_cap
    [ "$left" -lt "$timeout" ] && timeout=$left
    if [ "$timeout" -lt 60 ]; then
        say "$arm: skipped, only $left s of the budget left"
        echo "{\"arm\": \"$arm\", \"ok\": false, \"skipped\": \"budget\"}" > "$OUT/results-$arm.json"
        return
    fi
    rm -rf "$work/out-$arm"
    local recipe=hand_driver.py defaults=false
    case $arm in
        offline) recipe=nanonets-ocr2.py defaults=true
                 cmd=("$py" "$recipe" "$pages" "$work/out-$arm" "${common[@]}" --batch-size 16 "$dummy") ;;
        server) recipe=nanonets-ocr2-server.py defaults=true
                cmd=("$py" "$recipe" "$pages" "$work/out-$arm" "${common[@]}" --server http://127.0.0.1:8001 "$dummy") ;;
        saturate) recipe=lighton-ocr3-saturate.py defaults=true
                  cmd=("$py" "$recipe" "$pages" "$work/out-$arm" "${common[@]}" --server http://127.0.0.1:8002 "$dummy") ;;
        hand) cmd=(bash -c "$(declare -f hand_arm); hand_arm" ) ;;
    esac
    gpu_idle
    say "$arm: start (timeout $timeout s)"
    export model pages logs py here max_len max_tokens hand_conc
    local tmp=$work/tmp-$arm
    rm -rf "$tmp" && mkdir -p "$tmp"
    TMPDIR=$tmp "$py" "$here/monitor.py" run --stats "$logs/$arm-stats.json" --gpu-log "$logs/$arm-gpu.csv" \
        --timeout "$timeout" --grace 30 -- "${cmd[@]}" > "$logs/$arm-stdout.txt" 2> "$logs/$arm-stderr.txt"
    local rc=$?
    # A spawned server's log lands in TMPDIR (vllm-serve.log); keep it with the arm's logs.
    find "$tmp" -maxdepth 2 -name 'vllm-serve*.log' -exec cp {} "$logs/$arm-serve.log" \; 2>/dev/null
    "$py" "$here/monitor.py" merge --arm "$arm" --stdout "$logs/$arm-stdout.txt" --stats "$logs/$arm-stats.json" \
        --gpu-log "$logs/$arm-gpu.csv" --tflop-per-page "$tflop" \
        --extra "{\"pages_n\": $n_pages, \"max_tokens\": $max_tokens, \"max_model_len\": $max_len,
                  \"recipe\": \"$recipe\", \"shape\": \"qwen2_5_vl\", \"defaults\": $defaults}" \
        > "$OUT/results-$arm.json"
    collect_efficiency "$OUT/results-$arm.json"
    say "$arm: rc $rc; $(cat "$OUT/results-$arm.json" | head -c 600)"
    if [ "$rc" != 0 ]; then tail -25 "$logs/$arm-stderr.txt" >&2; fi
}

for arm in "${arms[@]}"; do
    if [ "$arm" = offline ] && [ "${BENCH_FAKE:-0}" = 1 ]; then say "offline: skipped (BENCH_FAKE)"; continue; fi
    run_arm "$arm"
done

tag=$(IFS=-; echo "${arms[*]}")
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1 || true
tar -C "$work" -czf "$OUT/logs-$tag.tar.gz" logs 2>/dev/null
rm -rf "$logs"
say "done: $(ls "$OUT" | tr '\n' ' ')"
for f in "$OUT"/results-*.json; do
    "$py" - "$f" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("summary") or {}
print(f"{r['arm']:9s} ok={r.get('ok')} sustained={r.get('sustained_pages_per_s')} billed={r.get('billed_pages_per_s')} "
      f"pages/s={s.get('pages_per_s')} tok/s={s.get('output_tokens_per_s')} "
      f"gpu_util_sustained={r.get('gpu_util_sustained')} mfu_sustained={r.get('mfu_sustained')} "
      f"inference_s={s.get('inference_s', s.get('seconds'))} elapsed_s={r.get('elapsed_s')} "
      f"peak_in_flight={s.get('peak_in_flight')} gpu_util_inf={r.get('gpu_util_mean_inference')} "
      f"host_pss_gib={r.get('host_tree_pss_peak_gib')} errors={s.get('errors', s.get('failed'))} "
      f"loops={s.get('loops_this_run')}")
PY
done
