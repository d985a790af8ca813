#!/usr/bin/env bash
# Runs a recipe from this clone as a user runs a released one, on one's own GPU box or against a --server:
#
#   bash tools/run.sh SCRIPT INPUT OUTPUT [recipe flags...]
#   make run SCRIPT=lighton-ocr3-saturate.py INPUT=./scans OUTPUT=./scans-ocr [ARGS="--server URL --max-samples 20"]
#
# Until a release publishes them, the scripts' URLs and the core wheel their headers pin do not exist, so `uv run
# SCRIPT` alone cannot resolve the header. This builds the core's wheel from src/ into dist/ (uv, with build
# isolation, one build of the tree at a time: setuptools' scratch lives in it) and lets the header's exact pin find
# it there: UV_NO_SOURCES=1 drops the header's wheel URL, --find-links offers the wheel, and --reinstall-package
# replaces a wheel of the same version that an earlier build installed. The header is never edited, so an offline
# recipe installs the vLLM it pins, as it would on HF Jobs. Paths are read from where the command was typed.
#
# With --jobs N (make submit), the recipe launches HF Jobs instead: this adds --core-wheel with the wheel just built,
# which travels with each job and which the job's uv installs in place of the header's unpublished one.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
script="${1:-}"
if [[ -z $script || ! -f $repo/$script || $script != *.py ]]; then
    echo "run: give a recipe of this clone first: $(cd "$repo" && ls ./*.py | xargs -n1 basename | grep -v compare | tr '\n' ' ')" >&2
    exit 2
fi
shift
if ! command -v uv >/dev/null; then
    echo "run: needs uv on PATH (https://docs.astral.sh/uv/getting-started/installation/)" >&2
    exit 2
fi
(
    flock 9
    uv build --wheel --quiet --out-dir "$repo/dist" "$repo"
    rm -rf "$repo/build" "$repo"/src/*.egg-info
) 9<"$repo/pyproject.toml"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml")"
wheel="$repo/dist/ocr_vllm_core-$version-py3-none-any.whl"
ships=()
for arg in "$@"; do
    case $arg in
        --jobs | --jobs=*) ships=(--core-wheel "$wheel") ;;
        --core-wheel | --core-wheel=*) ships=() && break ;;
    esac
done
set -- "$@" ${ships[@]+"${ships[@]}"}
export UV_NO_SOURCES=1
exec uv run --quiet --find-links "$repo/dist" --reinstall-package ocr-vllm-core --script "$repo/$script" "$@"
