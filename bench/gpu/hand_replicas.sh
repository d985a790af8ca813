#!/usr/bin/env bash
# On the device, after install.sh: the steady state of the replica driver, without the start-up ramp. Starts N
# independent `vllm serve` replicas of the Qwen3.5 shape with the machine plan's flags (4 API servers and 0.29 of
# the GPU each), one after another, each once the previous is healthy; then runs lighton-ocr3-saturate.py over all
# of them (--server URL1,URL2,...: the same pump, window and least-outstanding choice as a spawned fleet) and over
# the first alone, on the same pages. One JSON line per arm in $OUT/hand-replicas.jsonl.
#
#   REPLICAS=3 ONE_PAGES=384 bash bench/gpu/hand_replicas.sh
set -uo pipefail

source "$(dirname "$0")/env.sh"
n=${REPLICAS:-3}
one_pages=${ONE_PAGES:-384}
model=$work/qwen3_5
logs=$work/hand-logs
mkdir -p "$logs"
say() { echo "hand [$((SECONDS - t0)) s] $*" >&2; }
[ "${BENCH_FAKE:-0}" = 1 ] || [ -d "$site/vllm" ] || { say "no vllm in $site: run bench/gpu/install.sh first"; exit 3; }
install_vllm_shim
[ -f "$model/config.json" ] || "$py" "$here/make_model.py" "$model" --kind qwen3_5 >&2 || { say "make_model failed"; exit 1; }
[ -f "$pages/state.json" ] || "$py" "$here/make_pages.py" "$pages" --pages "$n_pages" --workers 12 >&2 \
    || { say "make_pages failed"; exit 1; }
tflop=$(tflop_per_page "$model") || { say "flops.py failed"; exit 1; }
gpu_idle

flags=(--limit-mm-per-prompt '{"image": 1}' --default-chat-template-kwargs '{"enable_thinking": false}'
       --mm-processor-cache-gb 0 --no-enable-prefix-caching --gdn-prefill-backend triton --max-model-len "$max_len"
       --api-server-count 4 --gpu-memory-utilization 0.29 --load-format dummy)
urls=()
groups=()
for ((i = 0; i < n; i++)); do
    port=$((8020 + i))
    setsid vllm serve "$model" "${flags[@]}" --host 127.0.0.1 --port "$port" > "$logs/serve-$port.log" 2>&1 &
    groups+=($!)
    "$py" - "$port" "$!" <<'PY' || { say "replica on $port never became healthy"; tail -20 "$logs/serve-$port.log" >&2; exit 1; }
import os, sys, time, urllib.request
deadline = time.monotonic() + 300
while time.monotonic() < deadline and os.path.exists(f"/proc/{sys.argv[2]}"):
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2).status == 200:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(1)
sys.exit(1)
PY
    say "replica $((i + 1)) healthy on $port"
    urls+=("http://127.0.0.1:$port")
done

run_arm() {
    local name=$1 server=$2 group watch=(); shift 2
    say "$name: start"
    for group in "${groups[@]}"; do watch+=(--watch-pid "$group"); done
    "$py" "$here/monitor.py" run --stats "$logs/$name-stats.json" --gpu-log "$logs/$name-gpu.csv" --timeout 400 \
        --grace 20 "${watch[@]}" -- "$py" lighton-ocr3-saturate.py "$pages" "$work/out-hand-$name" --model "$model" \
        --max-model-len "$max_len" --max-tokens "$max_tokens" --temperature 0 --ignore-eos --no-canary \
        --server "$server" "$@" > "$logs/$name-stdout.txt" 2> "$logs/$name-stderr.txt"
    "$py" "$here/monitor.py" merge --arm "$name" --stdout "$logs/$name-stdout.txt" --stats "$logs/$name-stats.json" \
        --gpu-log "$logs/$name-gpu.csv" --tflop-per-page "$tflop" \
        --extra '{"recipe": "lighton-ocr3-saturate.py", "shape": "qwen3_5", "defaults": false}' > "$logs/$name-merged.json"
    cat "$logs/$name-merged.json" >> "$OUT/hand-replicas.jsonl"
    collect_efficiency "$logs/$name-merged.json"
    say "$name: $(grep -o '"pages_per_s": [0-9.]*' "$logs/$name-stdout.txt" | tail -1)"
}

all=$(IFS=,; echo "${urls[*]}")
run_arm "replicas-$n" "$all" --max-samples "${MANY_PAGES:-1536}"
run_arm one "${urls[0]}" --max-samples "$one_pages"
for group in "${groups[@]}"; do kill -TERM -- "-$group" 2>/dev/null; done
sleep 5
for group in "${groups[@]}"; do kill -KILL -- "-$group" 2>/dev/null; done
tar -C "$work" -czf "$OUT/hand-logs.tar.gz" hand-logs 2>/dev/null
"$py" - "$OUT/hand-replicas.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    row = json.loads(line)
    s = row.get("summary") or {}
    print(row["arm"], "sustained", row.get("sustained_pages_per_s"), "billed", row.get("billed_pages_per_s"),
          "gpu_util_sustained", row.get("gpu_util_sustained"), "mfu_sustained", row.get("mfu_sustained"),
          "pages/s", s.get("pages_per_s"), "tok/s", s.get("output_tokens_per_s"), "inf_s",
          s.get("inference_s"), "busy", row.get("gpu_util_mean_inference"), "peak_in_flight", s.get("peak_in_flight"),
          "errors", s.get("errors"), "replicas", [r.get("pages") for r in s.get("replicas", [])])
PY
