#!/usr/bin/env bash
# On the device, after install.sh: one engine setting after another through a recipe, on the same pages (issue 17).
#
#   bash bench/gpu/sweep.sh 'NAME|SERVE FLAGS|RECIPE FLAGS' ...
#   bash bench/gpu/sweep.sh 'base||' 'mnbt32k|--max-num-batched-tokens 32768|' 'api8||--api-server-count 8'
#
# Each setting runs the recipe (RECIPE, default lighton-ocr3-saturate.py; the same pump whatever the model) with
# `--extra-serve-args "--load-format dummy SERVE FLAGS"` plus RECIPE FLAGS, so the recipe spawns `vllm serve`
# with its own flags, its machine plan (4 API servers on one H200) and the setting on top; pages/s is the recipe's
# own summary (inference only, start-up excluded), with its sustained and billed rates and GPU utilisation and MFU
# over the sustained interval (also into $OUT/h200-efficiency-<date>.json). One line per setting goes to
# $OUT/sweep.jsonl, also kept in
# $BENCH_WORK/sweep.jsonl across calls on a warm machine (so a later call's table holds the earlier baseline);
# the serve logs go to $OUT/sweep-logs.tar.gz. The table at the end gives each setting's ratio to the first one
# named `base` (the recipe's defaults), measured on the same machine.
#
# Environment: SHAPE (qwen2_5_vl, default, or qwen3_5: LightOnOCR-3 / OvisOCR2), RECIPE, BUDGET_S (570),
# ARM_TIMEOUT_S (330), MIN_LEFT_S (a setting is skipped when fewer seconds are left, default 190),
# PAGES_N (192), MAX_TOKENS (800), MAX_MODEL_LEN (8192), SITE (/tmp/site), BENCH_FAKE=1 (a fake `vllm serve`,
# no GPU).
set -uo pipefail

source "$(dirname "$0")/env.sh"
logs=$work/sweep-logs
mkdir -p "$logs"
shape=${SHAPE:-qwen2_5_vl}
recipe=${RECIPE:-lighton-ocr3-saturate.py}
model=$work/$shape
min_left=${MIN_LEFT_S:-190}

say() { echo "sweep [$((SECONDS - t0)) s] $*" >&2; }

[ "${BENCH_FAKE:-0}" = 1 ] || [ -d "$site/vllm" ] || { say "no vllm in $site: run bench/gpu/install.sh first"; exit 3; }
install_vllm_shim

[ -f "$model/config.json" ] || "$py" "$here/make_model.py" "$model" --kind "$shape" >&2 || { say "make_model failed"; exit 1; }
[ -f "$pages/state.json" ] || "$py" "$here/make_pages.py" "$pages" --pages "$n_pages" --workers 12 >&2 \
    || { say "make_pages failed"; exit 1; }
# The Qwen3.5 shape dies on its first prefill without this on the lean wheels (no flashinfer): see gpu-vllm.md.
base_serve=""
[ "$shape" = qwen3_5 ] && base_serve="--gdn-prefill-backend triton"
tflop=$(tflop_per_page "$model") || { say "flops.py failed"; exit 1; }

run_setting() {
    local name=$1 serve=$2 flags=$3 left timeout tmp rc
    left=$((budget - (SECONDS - t0) - 25))
    if [ "$left" -lt "$min_left" ]; then say "$name: skipped, $left s left"; return; fi
    timeout=$arm_cap
    [ "$left" -lt "$timeout" ] && timeout=$left
    tmp=$work/tmp-$name
    rm -rf "$tmp" "$work/out-$name" && mkdir -p "$tmp"
    gpu_idle
    say "$name: start (timeout $timeout s): serve [$base_serve $serve] recipe [$flags]"
    # shellcheck disable=SC2086  # flags are word lists on purpose
    TMPDIR=$tmp "$py" "$here/monitor.py" run --stats "$logs/$name-stats.json" --gpu-log "$logs/$name-gpu.csv" \
        --timeout "$timeout" --grace 30 -- "$py" "$recipe" "$pages" "$work/out-$name" --model "$model" \
        --max-model-len "$max_len" --max-tokens "$max_tokens" --temperature 0 --ignore-eos \
        --server http://127.0.0.1:8010 "--extra-serve-args=--load-format dummy $base_serve $serve" $flags \
        > "$logs/$name-stdout.txt" 2> "$logs/$name-stderr.txt"
    rc=$?
    for log in "$tmp"/vllm-serve*.log; do [ -f "$log" ] && cp "$log" "$logs/$name-${log##*/}"; done
    "$py" "$here/monitor.py" merge --arm "$name" --stdout "$logs/$name-stdout.txt" --stats "$logs/$name-stats.json" \
        --gpu-log "$logs/$name-gpu.csv" --tflop-per-page "$tflop" --serve-logs "$logs/$name"-vllm-serve*.log \
        > "$logs/$name-merged.json"
    "$py" - "$logs/$name-merged.json" "$name" "$shape" "$recipe" "$base_serve $serve" "$flags" "$n_pages" \
        "$max_tokens" "$max_len" >> "$work/sweep.jsonl" <<'PY'
import json, sys
path, name, shape, recipe, serve, flags, n, max_tokens, max_len = sys.argv[1:]
row = json.load(open(path))
# Flags of the bench, not settings: random weights need --no-canary, and --max-samples picks how many pages.
words = flags.split()
settings = [w for i, w in enumerate(words) if w != "--no-canary" and w != "--max-samples" and words[i - 1 : i] != ["--max-samples"]]
row.update(setting=name, shape=shape, recipe=recipe, serve_flags=serve.split(), recipe_flags=words,
           pages_n=int(n), max_tokens=int(max_tokens), max_model_len=int(max_len),
           defaults=not serve.replace("--gdn-prefill-backend triton", "").split() and not settings)
print(json.dumps(row))
PY
    tail -1 "$work/sweep.jsonl" > "$logs/$name-row.json" && collect_efficiency "$logs/$name-row.json"
    say "$name: rc $rc; pages/s $(grep -o '"pages_per_s": [0-9.]*' "$logs/$name-stdout.txt" | tail -1)"
    [ "$rc" = 0 ] || tail -20 "$logs/$name-stderr.txt" >&2
}

for spec in "$@"; do
    IFS='|' read -r name serve flags <<<"$spec"
    run_setting "$name" "$serve" "$flags"
done

cp "$work/sweep.jsonl" "$OUT/sweep.jsonl" 2>/dev/null
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1
tar -C "$work" -czf "$OUT/sweep-logs-$(date +%H%M%S).tar.gz" sweep-logs 2>/dev/null && rm -rf "$logs"
"$py" - "$work/sweep.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
base = {}
for row in rows:
    if row["setting"].startswith("base") and (row.get("summary") or {}).get("pages_per_s"):
        base.setdefault((row["shape"], row["recipe"]), row["summary"]["pages_per_s"])
for row in rows:
    s = row.get("summary") or {}
    ref = base.get((row["shape"], row["recipe"]))
    pps = s.get("pages_per_s")
    ratio = f"{pps / ref:.3f}" if pps and ref else "-"
    print(f"{row['setting']:14s} {row['shape']:10s} ok={row.get('ok')} pages/s={pps} x{ratio} "
          f"sustained={row.get('sustained_pages_per_s')} billed={row.get('billed_pages_per_s')} "
          f"gpu_util_sustained={row.get('gpu_util_sustained')} mfu_sustained={row.get('mfu_sustained')} "
          f"tok/s={s.get('output_tokens_per_s')} inf_s={s.get('inference_s')} busy={row.get('gpu_util_mean_inference')} "
          f"peak_in_flight={s.get('peak_in_flight')} start_s={row.get('startup_and_teardown_s')} "
          f"errors={s.get('errors')} serve={' '.join(row['serve_flags'])} recipe={' '.join(row['recipe_flags'])}")
    procs = row.get("processes") or {}
    print(f"    cores={procs.get('cores_total')} by role={procs.get('cores_by_role')} "
          f"queues={row.get('engine_queues')} per API server={row.get('requests_per_api_server')} "
          f"plan={(s.get('engine_plan') or {}).get('serve_args')}")
    held = row.get("cpu_sustained") or {}
    print(f"    sustained: cores={held.get('cores_total')} by role={held.get('cores_by_role')} "
          f"busiest={[(p['name'], p.get('cores')) for p in held.get('cpu_s_per_process', [])[:8]]} "
          f"queues={row.get('engine_queues_sustained')}")
    for profile in row.get("py_spy") or []:
        print(f"    py-spy {profile['file']}: {profile['samples']} samples; threads {profile['threads'][:4]}; "
              f"innermost {profile['innermost'][:6]}")
PY
