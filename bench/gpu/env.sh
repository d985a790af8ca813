# Sourced by run_all.sh, sweep.sh and hand_replicas.sh: where things are and the environment every GPU bench call
# runs vLLM in (offline Hub, no telemetry, the installed wheels first on the path, then the core). Sets here, root,
# t0, site, py, OUT, work, pages, n_pages, max_tokens, max_len, budget and arm_cap.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
t0=$SECONDS

site=${SITE:-/tmp/site}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
# The core as users get it: a wheel installed into $site wins, else the checkout's src/ (the recipes' plain-python
# run has no uv to resolve their pinned wheel); every summary's `core` says which ran.
export PYTHONPATH=$site:$root/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false DO_NOT_TRACK=1
OUT=${OUT:-/tmp/bench-out}
work=${BENCH_WORK:-/tmp/bench}
py=${PYTHON:-$(command -v python3)}
mkdir -p "$OUT" "$work/bin"
# The same pages and lengths for every arm and setting; the budget keeps a call inside the device's 600 s.
pages=$work/pages
n_pages=${PAGES_N:-192}
max_tokens=${MAX_TOKENS:-800}
max_len=${MAX_MODEL_LEN:-8192}
budget=${BUDGET_S:-570}
arm_cap=${ARM_TIMEOUT_S:-330}

# A `vllm` executable, since the recipes spawn plain `vllm serve`: the fake one with BENCH_FAKE=1. A Python script,
# as pip writes it (its spawned engine processes import it again, so its work waits behind __main__), so that the
# recipe reads the installed release from its interpreter (serving/installed.py).
install_vllm_shim() {
    if [ "${BENCH_FAKE:-0}" = 1 ]; then
        printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$py" "$here/fake_vllm.py" > "$work/bin/vllm"
    else
        printf '#!%s\nimport sys\nfrom vllm.entrypoints.cli.main import main\nif __name__ == "__main__":\n    sys.argv[0] = "vllm"\n    sys.exit(main())\n' \
            "$py" > "$work/bin/vllm"
    fi
    chmod +x "$work/bin/vllm"
    export PATH=$work/bin:$PATH
}

# Waits (up to 60 s) until the GPU holds less than 2 GiB, so that a run never starts beside the last one's engine.
# Callers define `say`.
gpu_idle() {
    local i used
    command -v nvidia-smi >/dev/null || return 0
    for ((i = 0; i < 60; i++)); do
        used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
        [ -n "$used" ] && [ "$used" -lt 2048 ] && return 0
        sleep 1
    done
    say "GPU still holds ${used:-?} MiB after 60 s"
}

# Model TFLOP of one page of the bench's pages for a model folder (flops.py), for each arm's mfu_sustained; the
# output tokens are MAX_TOKENS unless given.
tflop_per_page() {
    "$py" "$here/flops.py" "$1" --output "${2:-$max_tokens}" | "$py" -c 'import json, sys; print(json.load(sys.stdin)["total_tflop"])'
}

# Folds merged arm results into this day's h200-efficiency file, kept in $work across the calls of a warm machine
# and copied to $OUT (then to bench/results/ by hand).
collect_efficiency() {
    local name
    name=h200-efficiency-$(date -u +%F).json
    "$py" "$here/efficiency.py" "$work/$name" "$@" && cp "$work/$name" "$OUT/$name"
}
