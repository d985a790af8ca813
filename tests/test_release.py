"""The release tool (tools/release.py): every script pins the version it builds, the layout holds what the Hub repo
serves, and a released wheel is never overwritten."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from ocr_core.planning.job_commands import SCRIPTS_URL, job_command
from ocr_core.planning.provenance import script_source
from ocr_core.version import RELEASE_TABLE
from ocr_models import RECIPES
from tools import release
from tools.recipes import facts_of

ROOT = Path(__file__).resolve().parent.parent
IMPORT_TO_DISTRIBUTION = {"PIL": "pillow", "yaml": "pyyaml", "huggingface_hub": "huggingface-hub"}
FROM_THE_IMAGE = {"vllm"}  # the job's image brings it, or an offline script's own pin


def test_every_script_pins_the_core_this_checkout_builds():
    assert release.check() == []


def test_a_script_pinning_another_version_is_named_with_the_fix():
    text = (ROOT / "lighton-ocr3.py").read_text().replace("ocr-vllm-core==0.2.0", "ocr-vllm-core==0.1.9")
    problems = release.script_problems("lighton-ocr3.py", text, release.core_version())
    assert any("core '0.1.9'" in problem and "'0.2.0'" in problem for problem in problems), problems


@pytest.mark.parametrize("entry", RECIPES, ids=lambda entry: entry.script)
def test_a_header_names_an_image_only_for_the_command_that_reads_it(entry):
    """`hf jobs uv run` takes [tool.hf-jobs]'s image, and needs uv in it: HPD's vendor image has none, so its
    header invited a command that cannot start, while its docstring says `hf jobs run ... pip install uv`."""
    pins = release.read_pins((ROOT / entry.script).read_text())
    command = job_command(entry.script, facts_of(entry.script))
    assert (pins.image is not None) == command.startswith("hf jobs uv run "), (entry.script, pins.image, command)


def test_the_package_declares_every_package_the_core_imports():
    imported = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    outside = imported - set(sys.stdlib_module_names) - {"ocr_core", "ocr_models"} - FROM_THE_IMAGE
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {spec.split(">")[0].split("=")[0].strip().lower() for spec in declared}
    assert {IMPORT_TO_DISTRIBUTION.get(name, name).lower() for name in outside} <= names


@pytest.fixture(scope="module", autouse=True)
def online_builds() -> Iterator[None]:
    """The release builds its wheel as a maintainer's machine does, with build isolation: uv fetches the build
    backend from the package index. The session's UV_OFFLINE (tests/conftest.py: script runs resolve from uv's cache
    alone) would fail that build on a machine whose uv cache lacks the newest setuptools."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("UV_OFFLINE", raising=False)
        yield


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> tuple[Path, list[str]]:
    folder = tmp_path_factory.mktemp("hub-repo")
    return folder, release.layout(folder)


def test_the_layout_holds_the_scripts_the_wheel_and_the_docs(released):
    folder, _ = released
    wheel = folder / "wheels" / release.wheel_name(release.core_version())
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "ocr_core/entry.py" in names and "ocr_core/shapes/pump.py" in names and "ocr_models/hpd_parsing.py" in names
    assert not any(name.startswith("tests/") for name in names)
    for name in [entry.script for entry in RECIPES] + list(release.DOCS):
        assert (folder / name).read_bytes() == (ROOT / name).read_bytes(), name


def test_the_same_source_released_again_changes_nothing(released):
    folder, _ = released
    assert all(line.startswith("unchanged ") for line in release.layout(folder))


def test_a_released_wheel_is_never_overwritten(released):
    folder, _ = released
    wheel = folder / "wheels" / release.wheel_name(release.core_version())
    kept = folder / "wheels" / "ocr_vllm_core-0.1.0-py3-none-any.whl"
    kept.write_bytes(b"an older release")
    original = wheel.read_bytes()
    wheel.write_bytes(original + b"other bytes")
    with pytest.raises(release.ReleaseRefused, match="raise the version"):
        release.layout(folder)
    assert wheel.read_bytes() == original + b"other bytes"
    assert kept.read_bytes() == b"an older release"
    wheel.write_bytes(original)


def test_a_checkout_whose_scripts_disagree_is_not_laid_out(tmp_path):
    root = tmp_path / "checkout"
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns(".testbed", ".git", "out", "*.egg-info", "build"))
    project = root / "pyproject.toml"
    project.write_text(project.read_text().replace('version = "0.2.0"', 'version = "0.3.0"'))
    with pytest.raises(release.ReleaseRefused, match=r"0\.3\.0"):
        release.layout(tmp_path / "hub-repo", root)
    assert not (tmp_path / "hub-repo").exists()


def crlf_checkout(tmp_path: Path) -> Path:
    """This checkout's scripts with Windows line endings, as a checkout with git's autocrlf writes them."""
    root = tmp_path / "crlf-checkout"
    root.mkdir()
    shutil.copyfile(ROOT / "pyproject.toml", root / "pyproject.toml")
    for entry in RECIPES:
        (root / entry.script).write_bytes((ROOT / entry.script).read_bytes().replace(b"\n", b"\r\n"))
    return root


def test_a_crlf_checkout_is_released_with_the_hashes_of_the_bytes_a_run_reads(tmp_path):
    root = crlf_checkout(tmp_path)
    assert release.check(root) == []
    table = release.release_table(root)
    for entry in RECIPES:
        path = root / entry.script
        assert b"\r\n" in path.read_bytes()
        assert script_source(path, table).url is not None, entry.script


def table_in(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as archive:
        record = archive.read(next(name for name in archive.namelist() if name.endswith(".dist-info/RECORD")))
        assert f"ocr_core/{RELEASE_TABLE},sha256=".encode() in record
        return json.loads(archive.read(f"ocr_core/{RELEASE_TABLE}"))


def test_only_the_release_wheels_table_certifies_a_script(released, tmp_path):
    """A script's say-so about itself certifies nothing (an edited copy re-stamped was "the released" script): the
    table in the release wheel does, and a core without one (a source tree) certifies no script."""
    folder, _ = released
    table = table_in(folder / "wheels" / release.wheel_name(release.core_version()))
    assert set(table) == {entry.script for entry in RECIPES}
    script = "lighton-ocr3-saturate.py"
    assert script_source(ROOT / script, table).url == f"{SCRIPTS_URL}/{script}"
    edited = tmp_path / script
    edited.write_bytes((ROOT / script).read_bytes().replace(b'"top_p": 1.0', b'"top_p": 0.9'))
    copy = script_source(edited, table)
    assert copy.url is None and "a modified copy" in copy.describe()
    unchecked = script_source(ROOT / script, None)
    assert unchecked.url is None and "not a release build" in unchecked.describe()


def test_the_installed_release_wheel_records_its_scripts_as_released_and_an_edited_copy_as_modified(released, tmp_path):
    """The core reads its table from where the release tool puts it in the wheel, as installed (a wheel's files
    unpacked as an installer lays them out): the released bytes are "released" with their URL, an edited copy
    "modified". The table had moved beside command/provenance.py's reader, not beside the wheel's copy, so both
    were "unchecked" while the same core called itself a release build (issue 43)."""
    folder, _ = released
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(folder / "wheels" / release.wheel_name(release.core_version())) as archive:
        archive.extractall(site)
    script = "lighton-ocr3-saturate.py"
    edited = tmp_path / script
    edited.write_bytes((ROOT / script).read_bytes().replace(b'"top_p": 1.0', b'"top_p": 0.9'))
    probe = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from ocr_core.planning.provenance import released_scripts, script_source; "
        "from ocr_core.version import core_build; import ocr_core; "
        "print(json.dumps([ocr_core.__file__, core_build()] + "
        "[script_source(Path(path), released_scripts()).standing for path in sys.argv[2:]]))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe, str(site), str(ROOT / script), str(edited)],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    location, build, *standings = json.loads(ran.stdout)
    assert Path(location).is_relative_to(site)
    assert (build, standings) == ("release", ["released", "modified"])
