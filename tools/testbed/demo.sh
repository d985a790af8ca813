#!/usr/bin/env bash
# The README's first command: OCR pages with a recipe through a real vLLM engine on the CPU, the tiny random model
# standing in for the recipe's own (the text is noise, every step is real; a server recipe spawns `vllm serve`
# itself, the same path as on HF Jobs).
#
#   bash tools/testbed/demo.sh [INPUT [OUTPUT]] [recipe flags...]
#   make demo [SCRIPT=ovis-ocr2-server.py] [INPUT=./my-pages] [OUTPUT=./my-pages-ocr] [ARGS="--max-samples 5"]
#
# INPUT (default samples/dataset; or DEMO_INPUT) is anything a recipe reads: an image or PDF file, a folder of them,
# a dataset folder. OUTPUT (or DEMO_OUTPUT) defaults to ./out/<script>-<input name>, so the README's examples
# never write into each other's folder; rerunning one resumes it. SCRIPT (or DEMO_SCRIPT) is any recipe.
# What the tiny model needs is set here, never by the user: it never ends a page by itself, so --ignore-eos says
# running to --max-tokens is intended (else every page would count as truncated and the breaker would stop the run);
# the CPU engine runs eager, and the model's processor takes none of a recipe's pixel-band kwargs. Later flags win.
# The script runs as a user runs it, `uv run SCRIPT` with its header unedited, its pinned core resolved from a wheel
# built here from src/ (tools/testbed/core_wheels.py, which also says how an offline script's vLLM pin meets the CPU
# bed); the summary line's `core` names the folder the code came from. The wheel folder and the script's synced uv
# environment are the test suite's (tests/testbed/wheels.py): built and reinstalled only when src/ changed, so a
# demo never reinstalls the core under another run of the same script; they live in the bed's own uv cache, never
# the user's, so `make run` of the same script never runs on the stand-in vLLM (issue 44).
# INPUT and OUTPUT are read from the folder the demo was called from, as any command reads the paths typed to it: a
# path that starts with "." or names something there is made absolute before the demo moves into the clone; a Hub id
# (owner/name) is left as it is.
set -euo pipefail
caller="$PWD"
from_caller() {
    if [[ -z $1 || $1 == /* || $1 == "~"* ]]; then
        echo "$1"
    elif [[ $1 == .* || -e $caller/$1 ]]; then
        realpath -ms "$caller/$1"
    else
        echo "$1"
    fi
}
cd "$(dirname "$0")/../.."
script="${DEMO_SCRIPT:-lighton-ocr3-saturate.py}"
if [[ ! -f "$script" || $script != *.py ]]; then
    echo "demo: no recipe '$script' here; pick one of: $(ls ./*.py | xargs -n1 basename | grep -v compare | tr '\n' ' ')" >&2
    exit 2
fi
bash tools/testbed/install.sh
venv="${OCR_TESTBED_DIR:-$PWD/.testbed}/venv"
input="${DEMO_INPUT:-}"
output="${DEMO_OUTPUT:-}"
if [[ $# -gt 0 && $1 != -* ]]; then input="$1"; shift; fi
if [[ $# -gt 0 && $1 != -* ]]; then output="$1"; shift; fi
input="$(from_caller "$input")"
output="$(from_caller "$output")"
input="${input:-samples/dataset}"
name="$(basename "${input%/}")"
output="${output:-./out/${script%.py}-${name%.*}}"
model="$("$venv/bin/python" -m tests.testbed.tiny_model)"
engine="--enforce-eager --mm-processor-kwargs {}"
case "$script" in
    hpd-parsing-*)
        # Its speculative P-MTP head (looked up in the model's folder) and FlashInfer attention exist on a GPU only.
        demo_model="$PWD/out/.demo-model-hpd"
        mkdir -p "$demo_model/P-MTP"
        ln -sfn "$model"/* "$demo_model/"
        model="$demo_model"
        engine+=" --speculative-config None --attention-backend CPU_ATTN --attention-config {}"
        ;;
esac
flags=(--model "$model" --max-model-len 1024 --max-tokens 48 --temperature 0 --ignore-eos "--extra-serve-args=$engine")
if ! grep -q '(run_offline(FACTS' "$script"; then
    port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    flags+=(--server "http://127.0.0.1:$port")
fi
export PATH="$venv/bin:$PATH" VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# The tiny model is a local folder, so the demo needs no network, unless INPUT or OUTPUT is a Hub id: then the run
# reads or writes the Hub as the user asked, instead of being told to unset what the demo set.
if [[ ( $input == [./~]* || -e $input ) && ( $output == [./~]* || -e $output ) ]]; then export HF_HUB_OFFLINE=1; fi
# The suite's uv variables (tests/testbed/wheels.py): its wheels, its interpreter and its own uv cache, so the
# demo's environment, with the stand-in vLLM, is never the one a real run of the same script gets.
uv_settings="$("$venv/bin/python" -m tests.testbed.wheels "$script")"
while IFS= read -r setting; do export "$setting"; done <<<"$uv_settings"
# A message's advice offers `make demo` with the user's flags alone (src/ocr_core/command/rerun.py): the words the
# demo adds are named to the run, so the stand-in model folder and the demo's server port stay out of it.
demo_words="$("$venv/bin/python" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${flags[@]}")"
export OCR_VLLM_CLONE="$PWD" OCR_VLLM_DEMO="$demo_words"
echo "demo: $script $input -> $output" >&2
exec "$venv/bin/uv" run --quiet --script "$script" "$input" "$output" "${flags[@]}" "$@"
