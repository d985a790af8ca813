#!/usr/bin/env bash
# The README's first command: OCR the bundled sample pages with lighton-ocr3-saturate.py through a real vLLM
# engine on the CPU. The recipe spawns `vllm serve` itself (the same path as on HF Jobs); the tiny random model
# stands in for LightOnOCR-3, so the text is noise but every step is real. The random model never ends a page by
# itself, so --ignore-eos says that running to --max-tokens is intended (else every page would count as truncated
# and the circuit breaker would stop the run). Extra arguments go to the recipe; DEMO_INPUT picks another input, for
# example DEMO_INPUT=samples/pdf/sample-pages.pdf for the bundled PDF (one row per page).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/testbed/install.sh
venv="${OCR_TESTBED_DIR:-$PWD/.testbed}/venv"
model="$("$venv/bin/python" -m tests.testbed.tiny_model)"
out="${DEMO_OUTPUT:-./out/demo}"
port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export PATH="$venv/bin:$PATH" VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
exec "$venv/bin/python" lighton-ocr3-saturate.py "${DEMO_INPUT:-samples/dataset}" "$out" \
    --server "http://127.0.0.1:$port" --model "$model" --max-model-len 1024 --max-tokens 48 --temperature 0 --ignore-eos \
    --extra-serve-args="--enforce-eager" "$@"
