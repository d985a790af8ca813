#!/usr/bin/env bash
# Puts uv in the test bed's venv (tools/testbed/install.sh builds it): the tests and the demo run the shipped
# scripts as users do, `uv run SCRIPT`, and build the core's wheel with `uv build`. Idempotent: seconds when present.
# Kept apart from install.sh so that adding uv does not invalidate an existing bed's stamp (and rebuild it).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${OCR_TESTBED_DIR:-$repo/.testbed}/venv"
uv_version="0.13.9"
if [[ "$("$venv/bin/uv" --version 2>/dev/null)" != "uv $uv_version"* ]]; then
    "$venv/bin/python" -m pip install --quiet --progress-bar off "uv==$uv_version"
fi
echo "uv ready: $("$venv/bin/uv" --version)"
