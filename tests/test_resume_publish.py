"""Resume and publishing that hold on the Hub: nothing finished is lost, nothing is mixed or published over data
this job did not write. A fake vLLM server answers here (the engine's behaviour is not the point, except for the
offline shape, which runs the real CPU engine); the Hub is the folder double.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import yaml

from ocr_core.inputs.images import prepare_image
from ocr_core.publishing import assembly as assemble_module
from ocr_core.shapes import page_requests as requests_module
from ocr_core.store import hub as hub_module
from tests.testbed.env import REPO_ROOT, script_command, script_python
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.fake_server import answer_text, fake_server
from tests.testbed.hub_double import FolderHub
from tests.testbed.recipes import model_facts, run_entry

SAMPLES = REPO_ROOT / "samples" / "dataset"
PAGES = REPO_ROOT / "samples" / "pages"
REPO = "someone/ocr-out"
PROGRESS = Path(".ocr-progress") / "default" / "train"


@pytest.fixture(autouse=True)
def quick_hub_retries(monkeypatch):
    monkeypatch.setattr(hub_module, "UPLOAD_BACKOFF_S", 0.01)


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


def run_main(script: str, argv: list[str], capsys, hub: FolderHub | None = None) -> tuple[int, dict, str]:
    """Runs a recipe in this process; returns its exit code, its summary line and what it logged."""
    capsys.readouterr()
    code = run_entry(script, argv, hub)
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return code, json.loads(lines[-1]) if lines else {}, err


def served(server, *extra: str) -> list[str]:
    """Points a recipe at the fake server; later flags in `extra` win over the defaults here."""
    model = ["--server", server.url, "--model", server.state.model, "--max-model-len", "1024"]
    return [*model, "--max-tokens", "16", "--temperature", "0", *extra]


def load(folder: Path, config: str | None = None) -> datasets.Dataset:
    return datasets.load_dataset(str(folder), config, split="train", cache_dir=str(folder) + f".cache-{time.time()}")


def repeated(folder: Path, copies: int) -> Path:
    samples = datasets.load_dataset(str(SAMPLES), split="train")
    datasets.concatenate_datasets([samples] * copies).save_to_disk(str(folder))
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def hub_process(hub_folder: Path, script: str, argv: list[str], work: Path) -> subprocess.Popen:
    env = {**bed_env(), "OCR_WORK_DIR": str(work)}
    command = [str(script_python(script)), "-m", "tests.testbed.hub_run", str(hub_folder), script, *argv]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)


def stop_after_first_part(process: subprocess.Popen, progress: Path, hub: FolderHub) -> tuple[dict, str]:
    """SIGTERM once the run has written a progress part of its own (not one fetched from the Hub)."""
    fetched = {Path(name).name for name in hub_parts(hub)}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if {path.name for path in progress.glob("*.parquet")} - fetched:
            break
        time.sleep(0.1)
    assert process.poll() is None, process.communicate()[1][-3000:]
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1]), stderr


def hub_parts(hub: FolderHub, config: str = "default") -> list[str]:
    prefix = f".ocr-progress/{config}/train/"
    return [name for name in hub.list_files(REPO) if name.startswith(prefix) and name.endswith(".parquet")]


# ---- 1. offline recipes mirror their parts like the server recipes ----


@pytest.mark.heavy
def test_offline_run_killed_leaves_parts_on_the_hub_and_a_fresh_machine_resumes(tiny_model, tmp_path):
    source = repeated(tmp_path / "in", copies=4)
    hub_folder = tmp_path / "hub"
    argv = [
        str(source), REPO, "--model", str(tiny_model), "--max-model-len", "1024", "--max-tokens", "200",
        "--temperature", "0", "--batch-size", "4", "--extra-serve-args=--enforce-eager --mm-processor-kwargs {}",
        "--ignore-eos",
    ]  # fmt: skip
    first = hub_process(hub_folder, "nanonets-ocr2.py", argv, tmp_path / "machine-1")
    stopped, _ = stop_after_first_part(
        first, tmp_path / "machine-1" / "someone__ocr-out" / PROGRESS, FolderHub(hub_folder)
    )
    assert 0 < stopped["done_this_run"] < 48
    assert hub_parts(FolderHub(hub_folder)), "the killed offline run left nothing on the Hub"

    second = hub_process(hub_folder, "nanonets-ocr2.py", argv, tmp_path / "machine-2")
    stdout, stderr = second.communicate(timeout=600)
    assert second.returncode == 0, stderr[-3000:]
    finished = json.loads(stdout.strip().splitlines()[-1])
    assert finished["resumed"] == stopped["done_this_run"]
    assert finished["done_this_run"] == 48 - stopped["done_this_run"]
    assert len(load(hub_folder / REPO)) == 48


# ---- 2. --overwrite replaces the earlier job's parts on the Hub too ----


def test_overwrite_then_kill_then_rerun_keeps_no_earlier_text(tmp_path):
    source = repeated(tmp_path / "in", copies=2)
    hub_folder = tmp_path / "hub"
    with fake_server(delay_s=0.2) as server:
        earlier = [str(source), REPO, *served(server, "--max-tokens", "16", "--temperature", "0")]
        first = hub_process(hub_folder, "ovis-ocr2-server.py", earlier, tmp_path / "machine-1")
        assert first.wait(timeout=300) == 0, first.communicate()[1][-3000:]
        earlier_text = set(load(hub_folder / REPO)["markdown"])

        later = [str(source), REPO, *served(server, "--max-tokens", "16", "--temperature", "0.5", "--overwrite")]
        later += ["--max-inflight", "1"]
        second = hub_process(hub_folder, "ovis-ocr2-server.py", later, tmp_path / "machine-2")
        stop_after_first_part(second, tmp_path / "machine-2" / "someone__ocr-out" / PROGRESS, FolderHub(hub_folder))

        third = hub_process(hub_folder, "ovis-ocr2-server.py", later, tmp_path / "machine-3")
        _, stderr = third.communicate(timeout=300)
    assert third.returncode == 0, stderr[-3000:]
    texts = load(hub_folder / REPO)["markdown"]
    assert len(texts) == 24
    assert not earlier_text & set(texts), "text of the earlier job was published under the new one"


# ---- 3. the manifest fingerprints everything that changes a row's text ----


def two_config_input(folder: Path) -> Path:
    samples = datasets.load_dataset(str(SAMPLES), split="train")
    for name, rows in (("en", range(0, 6)), ("fr", range(6, 12))):
        (folder / name).mkdir(parents=True)
        samples.select(rows).to_parquet(str(folder / name / "train-00000-of-00001.parquet"))
    configs = [
        {"config_name": name, "data_files": [{"split": "train", "path": f"{name}/train-*"}]} for name in ("en", "fr")
    ]
    (folder / "README.md").write_text(f"---\n{yaml.safe_dump({'configs': configs})}---\n")
    return folder


def test_two_input_configs_into_one_output_are_refused(server, tmp_path, capsys):
    source = two_config_input(tmp_path / "in")
    out = tmp_path / "out"
    code, _, _ = run_main(
        "ovis-ocr2-server.py", [str(source), str(out), "--input-config", "en", *served(server)], capsys
    )
    assert code == 0
    before = snapshot(out)
    code, summary, err = run_main(
        "ovis-ocr2-server.py", [str(source), str(out), "--input-config", "fr", *served(server)], capsys
    )
    assert code == 2
    assert "input_config" in err and "--overwrite" in err and "--config" in err
    assert summary["exit_code"] == 2
    assert snapshot(out) == before


def test_a_sampling_change_is_refused_and_overwrite_redoes_every_row(server, tmp_path, capsys):
    out = tmp_path / "out"
    assert (
        run_main("ovis-ocr2-server.py", [str(SAMPLES), str(out), *served(server, "--max-tokens", "16")], capsys)[0] == 0
    )
    code, _, err = run_main(
        "ovis-ocr2-server.py", [str(SAMPLES), str(out), *served(server, "--temperature", "0.5")], capsys
    )
    assert code == 2 and "sampling" in err
    code, summary, _ = run_main(
        "ovis-ocr2-server.py", [str(SAMPLES), str(out), *served(server, "--temperature", "0.5", "--overwrite")], capsys
    )
    assert code == 0 and summary["done_this_run"] == 12 and summary["resumed"] == 0


@pytest.mark.parametrize("output", ["local", "hub"])
def test_a_run_refused_before_its_first_page_does_not_pin_its_settings(server, tmp_path, capsys, monkeypatch, output):
    """--max-tokens above the server's context is refused before any page is sent; the command its message asks
    for, with another --max-tokens, then runs: no result was made the other way, so nothing can mix."""
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub") if output == "hub" else None
    out = REPO if hub else str(tmp_path / "out")
    too_long = [str(SAMPLES), out, "--server", server.url, "--model", server.state.model, "--max-tokens", "8000"]
    code, _, err = run_main("ovis-ocr2-server.py", too_long, capsys, hub=hub)
    assert code == 2 and "--max-tokens" in err
    code, summary, err = run_main("ovis-ocr2-server.py", [*too_long[:-1], "16"], capsys, hub=hub)
    assert code == 0 and summary["done_this_run"] == 12, err[-2000:]
    code, _, err = run_main("ovis-ocr2-server.py", [*too_long[:-1], "16", "--temperature", "0.5"], capsys, hub=hub)
    assert code == 2 and "holds results made another way" in err, "the results made now still pin their settings"


def test_a_rerun_with_the_same_settings_resumes(server, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(SAMPLES), str(out), *served(server, "--max-samples", "5")]
    assert run_main("ovis-ocr2-server.py", argv, capsys)[0] == 0
    code, summary, _ = run_main("ovis-ocr2-server.py", argv, capsys)
    assert code == 0 and summary["resumed"] == 5 and summary["done_this_run"] == 0


def published_info(out: Path) -> list[dict]:
    rows = datasets.load_dataset(str(out), split="train", cache_dir=f"{out}.cache-{time.monotonic_ns()}")
    return [json.loads(value)[-1] for value in rows["inference_info"]]


def test_a_publish_only_rerun_keeps_the_provenance_of_the_run_that_wrote_the_text(server, tmp_path, capsys):
    """A rerun with nothing left to do (after a failed publish, a timeout) starts no server and learns no vLLM
    version: it must not record its own blanks over what the writing run saw."""
    out = tmp_path / "out"
    argv = [str(SAMPLES), str(out), *served(server, "--max-samples", "4")]
    assert run_main("ovis-ocr2-server.py", argv, capsys)[0] == 0
    written = published_info(out)
    code, summary, _ = run_main("ovis-ocr2-server.py", argv, capsys)
    assert code == 0 and summary["done_this_run"] == 0
    kept = published_info(out)
    assert [entry["vllm_version"] for entry in kept] == ["fake"] * 4
    assert [entry["serving"] for entry in kept] == [entry["serving"] for entry in written]
    card = (out / "README.md").read_text()
    assert "vLLM fake" in card and "0.00 pages/s" not in card and "did not start" in card
    assert "this run only published rows that earlier runs wrote" in card


# ---- 4. publishing never replaces data it did not write ----


@pytest.mark.parametrize("output", [".", "~", "input"])
def test_unsafe_local_outputs_are_refused_and_nothing_is_touched(server, tmp_path, capsys, monkeypatch, output):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "README.md").write_text("my own notes\n")
    (home / "data" / "train-00000-of-00001.parquet").write_bytes(b"not ours")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    source = repeated(tmp_path / "in", copies=1)
    before, inputs = snapshot(home), snapshot(source)
    target = str(source) if output == "input" else output
    code, _, err = run_main("ovis-ocr2-server.py", [str(source), target, *served(server, "--overwrite")], capsys)
    assert code == 2
    assert "OUTPUT" in err
    assert snapshot(home) == before and snapshot(source) == inputs


@pytest.mark.parametrize("output", ["notes.txt", "notes.txt/ocr"], ids=["a file", "inside a file"])
def test_an_output_that_is_or_lies_inside_a_file_is_a_command_error(server, tmp_path, capsys, output):
    """Issue 44: OUTPUT naming an existing file raised a bare NotADirectoryError, exit 1, with "rerun the same
    command to resume", which failed the same way forever. It is the user's to fix: exit 2 with the reason."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my own notes\n")
    target = str(tmp_path / output)
    code, summary, err = run_main("ovis-ocr2-server.py", [str(SAMPLES), target, *served(server)], capsys)
    assert (code, summary["exit_code"]) == (2, 2), err[-2000:]
    assert f"OUTPUT {target!r}" in err and "is a file" in err, err[-2000:]
    assert "NotADirectoryError" not in err and "rerun" not in err
    assert server.state.answered == 0 and notes.read_text() == "my own notes\n"


def test_a_foreign_hub_dataset_at_output_is_refused(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    repo = hub.repo(REPO)
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "train-00000-of-00001.parquet").write_bytes(b"someone else's data")
    (repo / "README.md").write_text("---\nlicense: mit\n---\n# Their dataset\n")
    before = snapshot(repo)
    code, _, err = run_main("ovis-ocr2-server.py", [str(SAMPLES), REPO, *served(server)], capsys, hub=hub)
    assert code == 2 and "--overwrite" in err and "data/train-00000-of-00001.parquet" in err
    assert snapshot(repo) == before and hub.commits == []


def test_a_foreign_local_folder_at_output_is_refused(server, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, _, err = run_main("ovis-ocr2-server.py", [str(SAMPLES), str(out), *served(server)], capsys)
    assert code == 2 and "notes.txt" in err
    assert snapshot(out) == {"notes.txt": b"keep me"}


# ---- 5. the card merges: other configs, their metadata and the prose outside our section stay ----


def test_two_recipes_publish_two_configs_and_every_config_loads(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    hub.create_repo(REPO, private=False)
    (hub.repo(REPO) / "README.md").write_text("---\nlicense: mit\n---\n# My OCR comparison\n\nNotes I wrote.\n")
    ovis = [str(SAMPLES), REPO, "--config", "ovis", *served(server, "--max-samples", "4")]
    assert run_main("ovis-ocr2-server.py", ovis, capsys, hub=hub)[0] == 0
    card = hub.repo(REPO) / "README.md"
    meta, _, body = card.read_text().removeprefix("---\n").partition("\n---\n")
    stale = {"config_name": "ovis", "features": [{"name": "text", "dtype": "int64"}], "splits": [{"name": "train"}]}
    card.write_text(f"---\n{yaml.safe_dump({**yaml.safe_load(meta), 'dataset_info': [stale]})}---\n{body}")
    assert run_main("ovis-ocr2-server.py", [*ovis, "--temperature", "0.5", "--overwrite"], capsys, hub=hub)[0] == 0
    nano = [str(SAMPLES), REPO, "--config", "nano", *served(server, "--max-samples", "3")]
    assert run_main("nanonets-ocr2-server.py", nano, capsys, hub=hub)[0] == 0

    folder = hub.repo(REPO)
    assert sorted(datasets.get_dataset_config_names(str(folder))) == ["nano", "ovis"]
    assert len(load(folder, "ovis")) == 4 and len(load(folder, "nano")) == 3
    text = card.read_text()
    assert "license: mit" in text and "Notes I wrote." in text and "# My OCR comparison" in text
    assert text.count("nanonets-ocr2-server.py") >= 1 and text.count("ovis-ocr2-server.py") >= 1


# ---- 6. --create-pr keeps mirroring ----


def test_create_pr_keeps_mirroring_progress(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    argv = [str(SAMPLES), REPO, "--create-pr", *served(server)]
    code, _, err = run_main("ovis-ocr2-server.py", argv, capsys, hub=hub)
    assert code == 0
    assert hub_parts(hub), "no progress part reached the Hub"
    opened = [commit for commit in hub.commits if commit.create_pr]
    assert len(opened) == 1, "the dataset must open one pull request, in one commit"
    assert opened[0].message.endswith("[default]"), "ocr-bench finds a PR's config by the title's [config]"
    assert opened[0].added == [
        ".ocr-progress/default/train/slice-00000-of-00001.json",
        "README.md",
        "data/train-00000-of-00001-00000.parquet",
    ]
    assert "main branch" in err


# ---- 7. a zero-length or corrupt part is skipped; its rows are redone ----


def test_a_zero_length_part_is_skipped_and_its_rows_redone(server, tmp_path, capsys):
    source = repeated(tmp_path / "in", copies=4)
    out = tmp_path / "out"
    argv = [str(source), str(out), *served(server, "--max-inflight", "1")]
    assert run_main("nanonets-ocr2-server.py", argv, capsys)[0] == 0
    parts = sorted((out / PROGRESS).glob("*.parquet"))
    assert len(parts) >= 2
    lost = pq.read_table(parts[0]).num_rows
    parts[0].write_bytes(b"")
    code, summary, err = run_main("nanonets-ocr2-server.py", argv, capsys)
    assert code == 0, err
    assert summary["done_this_run"] == lost and summary["resumed"] == 48 - lost
    assert "skipped" in err
    assert len(load(out)) == 48


# ---- 8. publish retries are idempotent ----


def test_a_publish_whose_commit_went_through_but_failed_on_the_client_exits_0(server, tmp_path, capsys, monkeypatch):
    """One row per data file, so the second publish deletes the first one's files: a retry must not delete twice."""
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(assemble_module, "SHARD_BYTES", 1)
    hub = FolderHub(tmp_path / "hub")
    argv = [str(SAMPLES), REPO, *served(server, "--max-samples", "6")]
    assert run_main("ovis-ocr2-server.py", argv, capsys, hub=hub)[0] == 0
    fewer = [str(SAMPLES), REPO, *served(server, "--max-samples", "3")]
    hub.fail_after_commit = "OCR with"
    code, _, err = run_main("ovis-ocr2-server.py", fewer, capsys, hub=hub)
    assert code == 0, err
    assert len(load(hub.repo(REPO))) == 3


def test_every_row_holds_the_text_of_its_own_page(server, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_main("nanonets-ocr2-server.py", [str(SAMPLES), str(out), *served(server)], capsys)[0] == 0
    output = load(out)
    inputs = datasets.load_dataset(str(SAMPLES), split="train").cast_column("image", datasets.Image(decode=False))
    assert output["page_id"] == inputs["page_id"]
    for row, text in zip(inputs, output["markdown"]):
        part = prepare_image(row["image"]["bytes"]).content_part()
        content = model_facts("nanonets_ocr2").build_content(part)
        request = {"messages": [{"role": "user", "content": content}], "temperature": 0.0, "max_tokens": 16}
        assert text == answer_text(request), row["page_id"]


# ---- one run at a time per slice of an output (issue 12, item 13) ----


def wait_for_progress(process: subprocess.Popen, progress: Path) -> None:
    deadline = time.monotonic() + 120
    while not list(progress.glob("*.parquet")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    assert process.poll() is None, process.communicate()[1][-3000:]


def test_the_same_command_twice_on_one_machine_stops_the_second(tmp_path, capsys):
    source = repeated(tmp_path / "in", copies=4)
    out = tmp_path / "out"
    with fake_server(delay_s=0.3) as server:
        argv = [str(source), str(out), *served(server, "--max-inflight", "1")]
        first = subprocess.Popen(
            script_command("ovis-ocr2-server.py", *argv),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bed_env(),
        )  # fmt: skip
        try:
            wait_for_progress(first, out / PROGRESS)
            code, summary, err = run_main("ovis-ocr2-server.py", argv, capsys)
            holder = re.search(r"pid (\d+)", err)
            holder_parent = parent_pid(int(holder[1])) if holder else None
        finally:
            first.terminate()
            first.communicate(timeout=60)
    assert code == 2 and "another run of this command is working on it" in err
    assert holder_parent == first.pid, err  # the python that `uv run` started holds the lock: uv's child
    assert f"kill {holder[1]}" in err and "--take-over" not in err, "a lock is held only by a live run"
    assert summary["exit_code"] == 2


def parent_pid(pid: int) -> int:
    """A live process's parent, from /proc (the field after the parenthesised command name)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_the_same_command_on_two_machines_stops_the_second(tmp_path, capsys, monkeypatch):
    source = repeated(tmp_path / "in", copies=4)
    hub_folder = tmp_path / "hub"
    with fake_server(delay_s=0.3) as server:
        argv = [str(source), REPO, *served(server, "--max-inflight", "1")]
        first = hub_process(hub_folder, "ovis-ocr2-server.py", argv, tmp_path / "machine-1")
        try:
            wait_for_progress(first, tmp_path / "machine-1" / "someone__ocr-out" / PROGRESS)
            monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "machine-2"))
            code, _, err = run_main("ovis-ocr2-server.py", argv, capsys, hub=FolderHub(hub_folder))
            assert code == 1 and "another run is writing" in err and "--take-over" in err
            first.terminate()
            assert first.wait(timeout=60) == 143
            assert not [name for name in FolderHub(hub_folder).list_files(REPO) if "/lease-" in name]
        finally:
            if first.poll() is None:
                first.kill()


def test_truncated_pages_are_counted_in_the_summary_and_the_card(tmp_path, capsys):
    out = tmp_path / "out"
    with fake_server(finish_reason="length") as server:
        argv = [str(SAMPLES), str(out), *served(server, "--max-error-rate", "1.0", "--no-canary")]
        code, summary, _ = run_main("ovis-ocr2-server.py", argv, capsys)
    assert code == 0 and summary["truncated"] == 12 and summary["truncated_this_run"] == 12
    assert "| of them cut off at max_tokens (text kept) | 12 |" in (out / "README.md").read_text()
    assert all(text for text in load(out)["markdown"])


# ---- a poison page is set aside and the rest publishes; --retry-errors tries it again (issue 23, item 6) ----


def test_a_page_that_always_fails_is_one_error_row_the_rest_publishes_and_retry_errors_redoes_it(
    tmp_path, capsys, monkeypatch
):
    """A budget of 2 s (other pages are answered within it, so the failures are the page's own), quick backoff."""
    monkeypatch.setattr(requests_module, "BACKOFF_BASE_S", 0.05)
    out = tmp_path / "out"
    with fake_server() as server:
        server.state.poison = True
        argv = [str(SAMPLES), str(out), *served(server, "--retry-budget", "2")]
        code, summary, err = run_main("ovis-ocr2-server.py", argv, capsys)
        assert code == 0, err
        assert summary["errors"] == 1
        published = load(out)
        assert len(published) == 12
        errors = [error for error in published["ocr_error"] if error]
        assert len(errors) == 1
        assert errors[0].startswith("failed every attempt: 3 attempts got no answer")
        assert "500: EngineCore encountered an issue" in errors[0] and "--retry-errors" in errors[0]

        server.state.poison = False
        code, summary, err = run_main("ovis-ocr2-server.py", [*argv, "--retry-errors"], capsys)
        assert code == 0, err
        assert summary["done_this_run"] == 1 and summary["errors"] == 0
        assert not any(load(out)["ocr_error"])


# ---- the card's own code works on an output with a page that could not be read ----


def card_code(card: str, folder: Path, cache: Path) -> str:
    """The card's Python block, with its repo placeholder filled in as a reader of a local copy fills it in."""
    block = card.split("```python\n")[1].split("```")[0]
    assert '"<this repo>"' in block, block
    local = f"{str(folder)!r}, data_files={{'train': 'data/train-*'}}, cache_dir={str(cache)!r}"
    return block.replace('"<this repo>"', local)


def test_the_cards_snippet_runs_on_an_output_with_a_page_that_could_not_be_read(server, tmp_path, capsys):
    """Issue 44: the output keeps a corrupt page's bytes as they came, and the card's
    `ds.filter(lambda row: row["ocr_error"] is not None)` decoded every image, so it raised `OSError: Truncated File
    Read` on exactly the row it is there to find; so did a plain `for row in ds`."""
    pages = tmp_path / "scans"
    pages.mkdir()
    for page in sorted(PAGES.iterdir())[:2]:
        shutil.copy(page, pages)
    whole = (PAGES / "page-01-report.png").read_bytes()
    (pages / "page-00-torn.png").write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "scans-ocr"
    code, summary, err = run_main("ovis-ocr2-server.py", [str(pages), str(out), *served(server)], capsys)
    assert (code, summary["rows"], summary["errors"]) == (0, 3, 1), err[-2000:]
    names: dict = {}
    exec(card_code((out / "README.md").read_text(), out, tmp_path / "cache"), names)
    assert (len(names["failed"]), len(names["trusted"])) == (1, 2)
    assert all(names["failed"]["ocr_error"]) and all(names["trusted"]["markdown"])
    assert len([row for row in names["rows"]]) == 3, "going through every row failed on the page that was not read"


def test_the_cards_join_snippet_runs_on_an_input_with_a_page_that_could_not_be_read(server, tmp_path, capsys):
    """With --columns the card shows how to put the text back beside the input's rows; its map over whole input
    rows decoded every image and raised on the page that could not be read, like the filter above."""
    whole = (PAGES / "page-01-report.png").read_bytes()
    cells = [{"bytes": whole, "path": None}, {"bytes": whole[: len(whole) // 2], "path": None}]
    rows = datasets.Dataset.from_dict({"id": ["a", "b"], "image": cells}).cast_column("image", datasets.Image())
    source = tmp_path / "scans"
    (source / "data").mkdir(parents=True)
    rows.to_parquet(source / "data" / "train-00000-of-00001.parquet")
    out = tmp_path / "scans-ocr"
    code, summary, err = run_main(
        "ovis-ocr2-server.py", [str(source), str(out), "--columns", "id", *served(server)], capsys
    )
    assert (code, summary["rows"], summary["errors"]) == (0, 2, 1), err[-2000:]
    card = (out / "README.md").read_text()
    join = card.split("Join the text back")[1]
    names: dict = {}
    exec(card_code(join, out, tmp_path / "cache"), names)
    assert names["pages"]["id"] == ["a", "b"] and names["pages"]["markdown"][0]
