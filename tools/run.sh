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
#
# A typo in a flag costs only the script's start: the wheel is built only when src/ changed since dist/ got it (its
# sha256 over src/ and pyproject.toml is kept beside it), and reinstalled only when the script's environment holds
# other files than the wheel's (their RECORDs, file by file with each file's sha256, differ), so a run of the demo or
# the tests in between, which install their own build of the same version, is never mistaken for this one. The run
# is marked as a clone's (OCR_VLLM_CLONE), so a message offers the clone's make targets, not the unreleased URLs.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
script="${1:-}"
if [[ -z $script || ! -f $repo/$script || $script != *.py ]]; then
    recipes="$(cd "$repo" && ls ./*.py | xargs -n1 basename | grep -v compare | tr '\n' ' ')"
    if [[ -z $script ]]; then
        echo "run: give a recipe of this clone first (SCRIPT=...): $recipes" >&2
    else
        echo "run: no recipe '$script' in this clone; pick one of: $recipes" >&2
    fi
    exit 2
fi
shift
if [[ ( $# -lt 2 || -z $1 || -z $2 ) && " $* " != *" --help "* && " $* " != *" -h "* ]]; then
    echo "run: give INPUT and OUTPUT: make run SCRIPT=$script INPUT=./scans OUTPUT=./scans-ocr [ARGS=\"...\"]" \
        "(make submit: Hub datasets, INPUT=you/scans OUTPUT=you/scans-ocr); ARGS=--help lists the flags" >&2
    exit 2
fi
if [[ $# -ge 2 && -z $1 && -z $2 ]]; then shift 2; fi
if ! command -v uv >/dev/null; then
    echo "run: needs uv on PATH: python3 -m pip install --user uv (or pipx install uv), or see" \
        "https://docs.astral.sh/uv/getting-started/installation/" >&2
    exit 2
fi
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml")"
wheel="$repo/dist/ocr_vllm_core-$version-py3-none-any.whl"
stamp="$repo/dist/.ocr_vllm_core-$version.sources"
(
    flock 9
    sources="$(cd "$repo" && find src pyproject.toml -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' -print0 \
        | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
    if [[ ! -f $wheel || "$(cat "$stamp" 2>/dev/null)" != "$sources" ]]; then
        uv build --wheel --quiet --out-dir "$repo/dist" "$repo"
        rm -rf "$repo/build" "$repo"/src/*.egg-info
        echo "$sources" >"$stamp"
    fi
) 9<"$repo/pyproject.toml"
# The core's files (path, sha256, size) as a RECORD lists them: the installed one's, or nothing where none is.
core_files() { { "$@" 2>/dev/null || true; } | { grep '^ocr_core/' || true; } | sort; }
python="$(UV_NO_SOURCES=1 uv python find --script "$repo/$script" 2>/dev/null || true)"
installed="$(core_files cat "${python%/bin/*}"/lib/python*/site-packages/ocr_vllm_core-"$version".dist-info/RECORD)"
read_record='import sys, zipfile; wheel = zipfile.ZipFile(sys.argv[1])
print(wheel.read(next(name for name in wheel.namelist() if name.endswith(".dist-info/RECORD"))).decode())'
shipped="$(core_files "${python:-false}" -c "$read_record" "$wheel")"
reinstall=()
if [[ -z $installed || $installed != "$shipped" ]]; then reinstall=(--reinstall-package ocr-vllm-core); fi
ships=()
core_only=false
for arg in "$@"; do
    case $arg in
        --dry-run | --help | -h) core_only=true ;;
    esac
done
for arg in "$@"; do
    case $arg in
        --jobs | --jobs=*) ships=(--core-wheel "$wheel") ;;
        --core-wheel | --core-wheel=*) ships=() && break ;;
    esac
done
set -- "$@" ${ships[@]+"${ships[@]}"}
export UV_NO_SOURCES=1 OCR_VLLM_CLONE="$repo"
if $core_only; then
    # --help and a --dry-run launch run nothing but the core: `python SCRIPT` skips the header, so an offline
    # recipe's vLLM (and its CUDA torch) is not installed for them; a real run still gets the header's every pin.
    exec uv run --quiet --no-project --find-links "$repo/dist" --reinstall-package ocr-vllm-core \
        --with "ocr-vllm-core==$version" python "$repo/$script" "$@"
fi
exec uv run --quiet --find-links "$repo/dist" ${reinstall[@]+"${reinstall[@]}"} --script "$repo/$script" "$@"
