#!/usr/bin/env bash
# Downloads every wheel the GPU bench needs on the H200 image (vLLM 0.26.0 and what it needs that the image
# lacks, plus `datasets` and its missing requirements) into .whl/, then packs them into one tar split into
# parts of at most 58 MiB, one part per folder: .gpu/p1/, .gpu/p2/, ... so that each device call carries one.
#
#   bash bench/gpu/fetch_wheels.sh            # run from anywhere; works in the repo root
#   PART_MB=58 bash bench/gpu/fetch_wheels.sh
#
# Packing: each wheel is rewritten with its members *stored* (a wheel's RECORD hashes the files, not the zip,
# so it stays valid), and the tar of those is compressed with xz. Deflate inside the wheels hides most of the
# redundancy from xz; stored wheels let it find it. install.sh undoes this (`tar -xJf`) and pip-installs the
# stored wheels as usual. PACK=plain: a plain tar of the original wheels; RESPLIT=1: only re-split the parts
# already packed (new PART_MB); STRIP_FA2=1: leave out vLLM's FA2 kernels, parts in .gpu/lean/ (see below).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

part_mb=${PART_MB:-58}
pack=${PACK:-xz}
lists=("$here/req-vllm026-lean.txt" "$here/req-extra.txt")

mkdir -p .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
more_platforms=(--platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64
                --platform manylinux_2_35_x86_64)

download() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" "$@" -d .whl
}

norm() { tr 'A-Z' 'a-z' <<<"$1" | sed -E 's/[-_.]+/_/g'; }

failed=()
wanted=()
while read -r spec; do
    spec=${spec%%#*}
    spec=$(tr -d '[:space:]' <<<"$spec")
    [ -n "$spec" ] || continue
    name=${spec%%==*}
    version=${spec#*==}
    wanted+=("$(norm "$name")")
    # already here (any wheel whose normalised name and version match)?
    have=0
    for w in .whl/*.whl; do
        [ -e "$w" ] || break
        base=$(basename "$w")
        wn=$(norm "${base%%-*}")
        rest=${base#*-}
        wv=${rest%%-*}
        if [ "$wn" = "$(norm "$name")" ] && [ "$wv" = "$version" ]; then have=1; break; fi
    done
    [ "$have" = 1 ] && continue
    echo "fetch $spec" >&2
    if ! download "$spec" 2>/dev/null; then
        if ! download "${more_platforms[@]}" "$spec"; then
            failed+=("$spec")
        fi
    fi
done < <(cat "${lists[@]}")

if [ ${#failed[@]} -gt 0 ]; then
    echo "no wheel found for: ${failed[*]}" >&2
    exit 1
fi

# One version of each package: two wheels of one name stop the whole install there.
dups=$(for w in .whl/*.whl; do norm "$(basename "$w" | cut -d- -f1)"; done | sort | uniq -d)
if [ -n "$dups" ]; then
    echo "more than one wheel of: $dups" >&2
    exit 1
fi
# Nothing in .whl beyond the lists (a leftover would travel and be installed).
wanted_list=$(printf '%s\n' "${wanted[@]}")
for w in .whl/*.whl; do
    n=$(norm "$(basename "$w" | cut -d- -f1)")
    grep -qx "$n" <<<"$wanted_list" || { echo "not in the lists, remove it: $w" >&2; exit 1; }
done

count=$(ls .whl/*.whl | wc -l)
echo "wheels: $count, $(du -sh .whl | cut -f1)" >&2

# Where the parts go: .gpu/ (p1, p2, ...), or .gpu/lean/ for STRIP_FA2=1.
dest=${DEST:-.gpu}
[ "${STRIP_FA2:-0}" = 1 ] && dest=${DEST:-.gpu/lean}
mkdir -p "$dest"

if [ "${RESPLIT:-0}" = 1 ] && [ -f "$dest/SHA256" ]; then
    # Re-split the packed tar already there (another PART_MB) without packing again.
    tarball=$dest/$(awk '{print $2}' "$dest/SHA256")
    cat "$dest"/p*/wheels.part.* > "$tarball"
    (cd "$dest" && sha256sum -c --quiet SHA256)
    rm -rf "$dest"/p[0-9]*
else
    rm -rf "$dest"/p[0-9]* "$dest/SHA256"
    tarball=$dest/wheels.tar
    if [ "$pack" = xz ]; then
        stage=$(mktemp -d)
        trap 'rm -rf "$stage"' EXIT
        mkdir -p "$stage/whl"
        # STRIP_FA2=1 leaves out vLLM's FlashAttention-2 kernels (305 MB, 85 MB packed). On Hopper vLLM 0.26
        # picks FA3 for the decoder and the vision encoder alike (v1/attention/backends/fa_utils.py), and
        # vllm_flash_attn imports _vllm_fa2_C inside try/except; FA2 only serves ALiBi, batch invariance and
        # other GPUs. Opt-in: not yet run on the device.
        STRIP=$([ "${STRIP_FA2:-0}" = 1 ] && echo "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" || true) \
        python3 - .whl "$stage/whl" <<'PY'
import os, pathlib, sys, zipfile
src, dst = map(pathlib.Path, sys.argv[1:])
strip = set(os.environ.get("STRIP", "").split())
for wheel in sorted(src.glob("*.whl")):
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(dst / wheel.name, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            if info.filename in strip:
                print(f"left out {info.filename} ({info.file_size / 1e6:.0f} MB)", file=sys.stderr)
                continue
            data = zin.read(info)
            info.compress_type = zipfile.ZIP_STORED
            zout.writestr(info, data)
PY
        tarball=$dest/wheels.tar.xz
        tar -C "$stage" -cf - whl | xz -T0 -6 > "$tarball"
    else
        tar -C . -cf "$tarball" --transform 's#^\.whl#whl#' .whl
    fi
fi

# Equal parts, as few as the cap allows: each stays well under the cap, leaving room for the working tree.
size=$(stat -c %s "$tarball")
cap=$((part_mb * 1024 * 1024))
nparts=$(((size + cap - 1) / cap))
chunk=$(((size + nparts - 1) / nparts))
split -b "$chunk" -d -a 2 "$tarball" "$dest/wheels.part."
n=0
for part in "$dest"/wheels.part.*; do
    n=$((n + 1))
    mkdir -p "$dest/p$n"
    mv "$part" "$dest/p$n/$(basename "$part")"
done
(cd "$dest" && sha256sum "$(basename "$tarball")" > SHA256 && cp SHA256 p1/ && echo "$n" > p1/PARTS \
    && rm "$(basename "$tarball")")
echo "parts: $n in $dest, at most ${part_mb} MiB each, total $(du -cb "$dest"/p*/wheels.part.* | tail -1 | cut -f1) bytes" >&2
du -sh "$dest"/p* >&2
