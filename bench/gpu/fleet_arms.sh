#!/usr/bin/env bash
# On the device, after install.sh: the fleet's rate per busy second under engine settings (issue 30, item 4). Each
# phase starts REPLICAS `vllm serve` replicas of the Qwen3.5 shape together, with the flags the machine plan gives
# them for the vLLM installed (scale.plan_scale with --replicas REPLICAS: API servers, renderer workers, memory
# share, KV cache in bytes; a SERVE FLAG of the same name as a planned one comes later and wins) plus SERVE FLAGS,
# under a CUDA MPS daemon when MPS is 1; then each run feeds PAGES pages through lighton-ocr3-saturate.py over the
# first USE replicas (--server URL,...: the recipe's own pump and window), so every replica is serving before the
# first page and the figure is the steady rate. One JSON line per run in $OUT/fleet-arms.jsonl, with the phase's
# start times and what each engine's log says of its start (profiling run, KV cache). A run's optional fourth
# field sets its output tokens (MAX_TOKENS otherwise): a run of 1 token costs the vision encoder and the prefill
# alone, so beside a full run on the same replicas it splits a page's time between them and the decode.
#
#   bash bench/gpu/fleet_arms.sh 'PHASE|REPLICAS|MPS|SERVE FLAGS|NAME:PAGES:USE[:TOKENS],NAME:PAGES:USE' ...
set -uo pipefail

source "$(dirname "$0")/env.sh"
model=$work/qwen3_5
logs=$work/arm-logs
mkdir -p "$logs"
say() { echo "arms [$((SECONDS - t0)) s] $*" >&2; }
[ "${BENCH_FAKE:-0}" = 1 ] || [ -d "$site/vllm" ] || { say "no vllm in $site: run bench/gpu/install.sh first"; exit 3; }
install_vllm_shim
export PYTHONPATH=$root/src:$PYTHONPATH
[ -f "$model/config.json" ] || "$py" "$here/make_model.py" "$model" --kind qwen3_5 >&2 || { say "make_model failed"; exit 1; }
[ -f "$pages/state.json" ] || "$py" "$here/make_pages.py" "$pages" --pages "$n_pages" --workers 12 >&2 \
    || { say "make_pages failed"; exit 1; }
mps_control=$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)

census() {  # files in the compile and kernel caches: which one a start fills tells what it compiled
    local d
    for d in "$HOME/.triton/cache" "$HOME/.cache/vllm/torch_compile_cache" /tmp/torchinductor_root; do
        printf '%s=%s ' "$(basename "$d")" "$(find "$d" -type f 2>/dev/null | wc -l)"
    done
}

phase() {
    local name=$1 n=$2 mps=$3 serve=$4 runs=$5 i port plan_flags started urls=() groups=() left
    left=$((budget - (SECONDS - t0) - 30))
    if [ "$left" -lt 150 ]; then say "$name: skipped, $left s left"; return; fi
    gpu_idle
    plan_flags=$("$py" -c "import sys; from ocr_core import detect_machine, installed_vllm_version, plan_scale
print(' '.join(plan_scale(detect_machine(), 0.8, None, replicas=int(sys.argv[1]), vllm_version=installed_vllm_version()).serve_args()))" "$n")
    if [ "$mps" = 1 ]; then
        export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        "$mps_control" -d && say "$name: MPS daemon started" || say "$name: MPS daemon did not start"
    fi
    say "$name: caches before: $(census)"
    started=$SECONDS
    for ((i = 0; i < n; i++)); do
        port=$((8020 + i))
        # shellcheck disable=SC2086
        setsid vllm serve "$model" --limit-mm-per-prompt '{"image": 1}' \
            --default-chat-template-kwargs '{"enable_thinking": false}' --mm-processor-cache-gb 0 \
            --no-enable-prefix-caching --gdn-prefill-backend triton --max-model-len "$max_len" --load-format dummy \
            $plan_flags $serve --host 127.0.0.1 --port "$port" > "$logs/$name-serve-$port.log" 2>&1 &
        groups+=($!)
        urls+=("http://127.0.0.1:$port")
    done
    "$py" - "$started" "${urls[@]}" > "$logs/$name-ready.json" <<'PY'
import json, sys, time, urllib.request
began = time.monotonic()
ready = {}
while len(ready) < len(sys.argv) - 2 and time.monotonic() - began < 420:
    for url in sys.argv[2:]:
        if url not in ready:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    ready[url] = round(time.monotonic() - began, 1)
            except OSError:
                pass
    time.sleep(1)
print(json.dumps({"ready_s": ready}))
PY
    say "$name: ready $(cat "$logs/$name-ready.json"); caches after: $(census)"
    local spec run pages_n use tokens server watch
    IFS=, read -ra spec <<<"$runs"
    for run in "${spec[@]}"; do
        IFS=: read -r rname pages_n use tokens <<<"$run"
        tokens=${tokens:-$max_tokens}
        left=$((budget - (SECONDS - t0) - 25))
        if [ "$left" -lt 60 ]; then say "$name/$rname: skipped, $left s left"; continue; fi
        server=$(IFS=,; echo "${urls[*]:0:$use}")
        say "$name/$rname: $pages_n pages of $tokens tokens over $use replica(s)"
        watch=()
        for group in "${groups[@]}"; do watch+=(--watch-pid "$group"); done
        "$py" "$here/monitor.py" run --stats "$logs/$name-$rname-stats.json" --gpu-log "$logs/$name-$rname-gpu.csv" \
            --timeout "$left" --grace 15 "${watch[@]}" -- "$py" lighton-ocr3-saturate.py "$pages" "$work/out-$name-$rname" \
            --model "$model" --max-model-len "$max_len" --max-tokens "$tokens" --temperature 0 --ignore-eos \
            --no-canary --server "$server" --max-samples "$pages_n" \
            > "$logs/$name-$rname-stdout.txt" 2> "$logs/$name-$rname-stderr.txt"
        extra=$("$py" - "$logs" "$name" "$n" "$mps" "$plan_flags $serve" "$use" "$tokens" <<'PY'
import glob, json, re, sys
logs, name, n, mps, flags, use, tokens = sys.argv[1:]
starts = []
for path in sorted(glob.glob(f"{logs}/{name}-serve-*.log")):
    text = open(path, errors="replace").read()
    grab = lambda pattern: [float(x.replace(",", "")) for x in re.findall(pattern, text)]
    starts.append({"log": path.rsplit("/", 1)[-1], "profiling_warmup_s": grab(r"Initial profiling/warmup run took ([\d.]+) s"),
                   "torch_compile_s": grab(r"torch.compile took ([\d.]+) s"), "model_loading_gib": grab(r"Model loading took ([\d.]+) GiB"),
                   "kv_cache_tokens": grab(r"GPU KV cache size: ([\d,]+) tokens"), "init_engine_s": grab(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)")})
ready = json.load(open(f"{logs}/{name}-ready.json"))
print(json.dumps({"recipe": f"lighton-ocr3-saturate.py --server over {use} of {n} replicas started together, {tokens} output tokens",
                  "shape": "qwen3_5", "defaults": False, "phase": name, "replicas": int(n), "mps": mps == "1", "serve_flags": flags.split(), "replicas_used": int(use),
                  "max_tokens": int(tokens), "ready": ready, "engine_starts": starts}))
PY
)
        "$py" "$here/monitor.py" merge --arm "$name-$rname" --stdout "$logs/$name-$rname-stdout.txt" \
            --stats "$logs/$name-$rname-stats.json" --gpu-log "$logs/$name-$rname-gpu.csv" --extra "$extra" \
            --tflop-per-page "$(tflop_per_page "$model" "$tokens")" > "$logs/$name-$rname-merged.json"
        cat "$logs/$name-$rname-merged.json" >> "$OUT/fleet-arms.jsonl"
        collect_efficiency "$logs/$name-$rname-merged.json"
        say "$name/$rname: $(grep -o '"\(sustained_\|billed_\)\?pages_per_s": [0-9.]*' "$logs/$name-$rname-stdout.txt" | tr '\n' ' ')"
    done
    for group in "${groups[@]}"; do kill -TERM -- "-$group" 2>/dev/null; done
    sleep 5
    for group in "${groups[@]}"; do kill -KILL -- "-$group" 2>/dev/null; done
    if [ "$mps" = 1 ]; then
        echo quit | "$mps_control"; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
}

for spec in "$@"; do
    IFS='|' read -r name n mps serve runs <<<"$spec"
    phase "$name" "$n" "$mps" "$serve" "$runs"
done
tar -C "$work" -czf "$OUT/arm-logs-$(date +%H%M%S).tar.gz" arm-logs 2>/dev/null && rm -rf "$logs"
"$py" - "$OUT/fleet-arms.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    row = json.loads(line)
    s = row.get("summary") or {}
    print(row["arm"], "pages/s", s.get("pages_per_s"), "sustained", s.get("sustained_pages_per_s"), "billed",
          s.get("billed_pages_per_s"), "busy", row.get("gpu_util_mean_inference"), "in_flight", s.get("peak_in_flight"),
          "errors", s.get("errors"), "ready", (row.get("ready") or {}).get("ready_s"),
          "warmup", [e["profiling_warmup_s"] for e in row.get("engine_starts", [])])
PY
