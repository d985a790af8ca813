#!/usr/bin/env bash
# On the device: joins the wheel parts, checks them, unpacks, and installs every wheel into /tmp/site.
#
#   bash bench/gpu/install.sh [FOLDER ...]     # folders holding wheels.part.NN (default: /tmp/parts .gpu/p*)
#   SITE=/tmp/site (default)
#
# Then run everything with PYTHONPATH=/tmp/site. The parts come from bench/gpu/fetch_wheels.sh; part 1 carries
# SHA256 (the name and checksum of the whole packed tar) and PARTS (how many there are).
set -euo pipefail

site=${SITE:-/tmp/site}
work=${WHEEL_WORK:-/tmp/wheels}
started=$SECONDS

if [ $# -gt 0 ]; then dirs=("$@"); else dirs=(/tmp/parts); for d in .gpu/p*; do [ -d "$d" ] && dirs+=("$d"); done; fi

declare -A part_of=()
sumfile="" countfile=""
for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    for f in "$d"/wheels.part.*; do
        [ -e "$f" ] || continue
        part_of[$(basename "$f")]=$f
    done
    [ -f "$d/SHA256" ] && sumfile=$d/SHA256
    [ -f "$d/PARTS" ] && countfile=$d/PARTS
done
if [ -z "$sumfile" ]; then
    echo "install: no SHA256 among ${dirs[*]} (it travels in part 1)" >&2
    exit 1
fi
want=$(cat "$countfile" 2>/dev/null || echo "${#part_of[@]}")
missing=()
for ((i = 0; i < want; i++)); do
    name=$(printf 'wheels.part.%02d' "$i")
    [ -n "${part_of[$name]:-}" ] || missing+=("p$((i + 1))")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install: missing parts: ${missing[*]} (have ${#part_of[@]} of $want; carry them again)" >&2
    exit 1
fi

rm -rf "$work" && mkdir -p "$work"
tarname=$(awk '{print $2}' "$sumfile")
for ((i = 0; i < want; i++)); do cat "${part_of[$(printf 'wheels.part.%02d' "$i")]}"; done > "$work/$tarname"
cp "$sumfile" "$work/SHA256"
(cd "$work" && sha256sum -c --quiet SHA256) || { echo "install: checksum mismatch" >&2; exit 1; }
case "$tarname" in
    *.xz)
        if command -v xz >/dev/null; then
            xz -dc -T0 "$work/$tarname" | tar -C "$work" -xf -
        else
            python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer, 1<<20)' \
                "$work/$tarname" | tar -C "$work" -xf -
        fi ;;
    *) tar -C "$work" -xf "$work/$tarname" ;;
esac
rm -f "$work/$tarname"
echo "install: $(ls "$work"/whl/*.whl | wc -l) wheels unpacked in $((SECONDS - started)) s" >&2

mkdir -p "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$work"/whl/*.whl
rm -rf "$work"
echo "install: done in $((SECONDS - started)) s into $site" >&2
PYTHONPATH=$site python3 - <<'PY'
import importlib.metadata as md
import sys
names = ["vllm", "torch", "transformers", "datasets", "pyarrow", "fsspec", "huggingface-hub", "tokenizers", "numpy",
         "pillow", "httpx", "tqdm", "pyyaml", "xxhash", "multiprocess", "dill"]
found = {}
for name in names:
    try:
        found[name] = md.version(name)
    except md.PackageNotFoundError:
        found[name] = None
print("install: versions", found, file=sys.stderr)
import datasets  # noqa: F401,E402  the recipes and make_pages need it
print("install: datasets imports", file=sys.stderr)
PY
