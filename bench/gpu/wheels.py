"""The wheels the GPU bench needs on the H200 image, carried to the device in parts: fetched and packed here, joined
and installed there.

    python bench/gpu/wheels.py fetch [--lean]                 # here: .whl/, then the parts in .gpu/p1, .gpu/p2, ...
    python bench/gpu/wheels.py install [FOLDER ...]           # there: join, check, unpack, pip install into --site

The lists: req-vllm026-lean.txt (vLLM 0.26.0 and what it needs that the image lacks) and req-extra.txt (`datasets`
and its missing requirements). The device tool carries at most 64 MiB a call, the checkout that travels with every
call included (about 7 MiB), so the packed tar is split into equal parts of at most --part-mb (48) MiB, one folder
each; part 1 also holds SHA256 (the tar's name and checksum) and PARTS (how many there are). Packing rewrites each
wheel with its members stored (a wheel's RECORD hashes the files, not the zip, so it stays valid), so that xz finds
the redundancy deflate hides. `--lean` leaves out
vLLM's FlashAttention-2 kernels, which Hopper does not use (FA3 serves the decoder and the vision encoder), into
.gpu/lean/: fewer parts.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LISTS = (HERE / "req-vllm026-lean.txt", HERE / "req-extra.txt")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
MORE_PLATFORMS = ("manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64")
FA2 = "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
PART_UNIT = 2**20  # --part-mb's unit
SHOWN = ("vllm", "torch", "transformers", "datasets", "pyarrow", "fsspec", "huggingface-hub", "numpy", "httpx")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wanted() -> dict[str, str]:
    """Each listed package's normalised name and its pinned version."""
    specs = {}
    for path in LISTS:
        for line in path.read_text().splitlines():
            spec = line.split("#", 1)[0].strip()
            if spec:
                name, version = spec.split("==")
                specs[norm(name)] = version
    return specs


def download(spec: str, folder: Path, platforms: tuple[str, ...]) -> bool:
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version"]
    command += [
        "3.12",
        "--implementation",
        "cp",
        *(f"--platform={p}" for p in (*platforms, "manylinux1_x86_64", "any")),
    ]
    return subprocess.run([*command, spec, "-d", str(folder)], check=False).returncode == 0


def fetch_wheels(folder: Path) -> list[Path]:
    """Every listed wheel in `folder` (those already there are kept), and nothing else."""
    folder.mkdir(exist_ok=True)
    have = {(norm(w.name.split("-")[0]), w.name.split("-")[1]): w for w in folder.glob("*.whl")}
    specs = wanted()
    failed = [
        f"{name}=={version}"
        for name, version in specs.items()
        if (name, version) not in have
        and not download(f"{name}=={version}", folder, PLATFORMS)
        and not download(f"{name}=={version}", folder, PLATFORMS + MORE_PLATFORMS)
    ]
    if failed:
        raise SystemExit(f"wheels: no wheel found for {failed}")
    wheels = sorted(folder.glob("*.whl"))
    names = [norm(w.name.split("-")[0]) for w in wheels]
    extra = sorted({w.name for w, name in zip(wheels, names, strict=True) if name not in specs})
    twice = sorted({name for name in names if names.count(name) > 1})
    if extra or twice:
        raise SystemExit(f"wheels: remove from {folder}: not in the lists {extra}; more than one version of {twice}")
    return wheels


def stored(wheels: list[Path], stage: Path, lean: bool) -> None:
    """Each wheel rewritten with its members stored (FA2's kernels left out with `lean`)."""
    stage.mkdir(parents=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(stage / wheel.name, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                if lean and info.filename == FA2:
                    print(f"wheels: left out {info.filename} ({info.file_size / 1e6:.0f} MB)", file=sys.stderr)
                    continue
                data = zin.read(info)
                info.compress_type = zipfile.ZIP_STORED
                zout.writestr(info, data)


def pack(wheels: list[Path], dest: Path, lean: bool, part_mb: int) -> list[Path]:
    """The stored wheels in one xz tar, split into equal parts dest/p1, dest/p2, ..."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    tarball = dest / "wheels.tar.xz"
    with tempfile.TemporaryDirectory() as scratch:
        stored(wheels, Path(scratch) / "whl", lean)
        tar = subprocess.Popen(["tar", "-C", scratch, "-cf", "-", "whl"], stdout=subprocess.PIPE)
        with open(tarball, "wb") as out:
            subprocess.run(["xz", "-T0", "-6"], stdin=tar.stdout, stdout=out, check=True)
        tar.wait()
    data = tarball.read_bytes()
    cap = part_mb * PART_UNIT
    count = -(-len(data) // cap)
    size = -(-len(data) // count)
    parts = []
    for index in range(count):
        folder = dest / f"p{index + 1}"
        folder.mkdir()
        parts.append(folder / f"wheels.part.{index:02d}")
        parts[-1].write_bytes(data[index * size : (index + 1) * size])
    (dest / "p1" / "SHA256").write_text(f"{hashlib.sha256(data).hexdigest()}  {tarball.name}\n")
    (dest / "p1" / "PARTS").write_text(f"{count}\n")
    tarball.unlink()
    return parts


def fetch(args: argparse.Namespace) -> int:
    wheels = fetch_wheels(ROOT / ".whl")
    print(f"wheels: {len(wheels)}, {sum(w.stat().st_size for w in wheels) / 1e6:.0f} MB", file=sys.stderr)
    dest = ROOT / ".gpu" / "lean" if args.lean else ROOT / ".gpu"
    parts = pack(wheels, dest, args.lean, args.part_mb)
    for part in parts:
        print(f"{part.parent.relative_to(ROOT)}: {part.stat().st_size / 2**20:.1f} MiB")
    return 0


def joined(folders: list[Path], scratch: Path) -> Path:
    """The packed tar from the parts found in `folders`, its checksum checked."""
    parts = {part.name: part for folder in folders for part in folder.glob("wheels.part.*")}
    sums = [folder / "SHA256" for folder in folders if (folder / "SHA256").exists()]
    if not sums:
        raise SystemExit(f"wheels: no SHA256 among {[str(f) for f in folders]} (it travels in part 1)")
    want = int(next(folder / "PARTS" for folder in folders if (folder / "PARTS").exists()).read_text())
    missing = [f"p{i + 1}" for i in range(want) if f"wheels.part.{i:02d}" not in parts]
    if missing:
        raise SystemExit(f"wheels: missing parts {missing} (have {len(parts)} of {want}; carry them again)")
    checksum, name = sums[0].read_text().split()
    tarball = scratch / name
    digest = hashlib.sha256()
    with open(tarball, "wb") as out:
        for index in range(want):
            data = parts[f"wheels.part.{index:02d}"].read_bytes()
            digest.update(data)
            out.write(data)
    if digest.hexdigest() != checksum:
        raise SystemExit("wheels: checksum mismatch: a part is damaged; carry the parts again")
    return tarball


def install(args: argparse.Namespace) -> int:
    folders = args.folders or [Path("/tmp/parts"), *sorted((ROOT / ".gpu").glob("p*"))]
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(joined([f for f in folders if f.is_dir()], Path(scratch))) as tar:
            # The "data" filter (Python 3.11.4 and later, and backports) refuses links and paths out of the folder;
            # an older interpreter extracts without it the archive this tool packed itself.
            tar.extractall(scratch, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        wheels = sorted(Path(scratch, "whl").glob("*.whl"))
        args.site.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        subprocess.run(
            [*command, "--no-cache-dir", "--upgrade", "--target", str(args.site), *map(str, wheels)], check=True
        )
    print(f"wheels: {len(wheels)} installed into {args.site}", file=sys.stderr)
    sys.path.insert(0, str(args.site))
    metadata = importlib.import_module("importlib.metadata")
    for name in SHOWN:
        try:
            print(f"  {name} {metadata.version(name)}", file=sys.stderr)
        except metadata.PackageNotFoundError:
            print(f"  {name} not installed", file=sys.stderr)
    importlib.import_module("datasets")  # the recipes and make_pages need it
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    fetching = verbs.add_parser("fetch", help="download the listed wheels and pack them into parts (here)")
    fetching.add_argument("--lean", action="store_true", help="leave out vLLM's FA2 kernels: parts in .gpu/lean/")
    fetching.add_argument("--part-mb", type=int, default=48, help="the largest part, in MiB")
    installing = verbs.add_parser("install", help="join the parts, check, unpack and install them (on the device)")
    installing.add_argument("folders", type=Path, nargs="*", help="folders of parts (default /tmp/parts .gpu/p*)")
    installing.add_argument("--site", type=Path, default=Path("/tmp/site"), help="where the wheels go")
    args = parser.parse_args()
    return fetch(args) if args.verb == "fetch" else install(args)


if __name__ == "__main__":
    sys.exit(main())
