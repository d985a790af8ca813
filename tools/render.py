"""Renders each shipped script from its model's module (src/ocr_models/<model>.py), where the model is stated once.

A script is its PEP 723 header (the core's pin and wheel URL, an offline script's vLLM pin, the job's image and
flavor), a docstring (the module's first paragraph, what the script's shape does and its twin, the job command, the
rest of the module's docstring), the module's `FACTS = ModelFacts(...)` copied as written, comments included, with
each hook it names prefixed by the module (`parse=parse` becomes `parse=ovis_ocr2.parse`), and the shape's call.
tools/release.py writes the scripts with it (`render`) and fails on one that differs (`check`).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from types import ModuleType

import ocr_core
from ocr_core.internals import DEFAULT_JOB_TIMEOUT, DISTRIBUTION, job_command
from ocr_models import Recipe, model_module, recipe

# The docstring's own paragraphs are wrapped this narrow, as the scripts always were: the twin's name moves a break.
DOCSTRING_WIDTH = 116
NO_IMAGE = (
    "# no image: `hf jobs uv run` needs uv in it, and the vendor's image has none; the docstring's `hf jobs run` "
    "installs it"
)
CLOSING = (
    "To change the prompt or the sampling, edit FACTS below (a run of an edited copy is recorded as modified, never "
    "as this release). The rest is the package ocr-vllm-core, pinned above; twin scripts state the same facts, and "
    "the tests check that they do."
)
# vLLM installs only on Linux; elsewhere (a laptop launching --jobs, reading --help) an offline header resolves
# without it instead of failing to build vLLM from source, and a run there stops at the GPU check with its job command
VLLM_PLATFORMS = "sys_platform == 'linux'"
NOQA = "# ruff: noqa: E501  (the job command above is one line, to copy whole)"


class RenderRefused(Exception):
    """A model's module cannot be rendered into a script; the message says what to change there."""


@dataclass(frozen=True)
class ShapeText:
    """What a script's docstring says of its shape: how it drives the engine, how its twin (of the other shape)
    is described, and how to run it on one's own machine."""

    drives: str
    as_twin: str
    local_runs: tuple[str, ...]
    local_where: str


SERVER_RUNS = ("uv run {script} INPUT OUTPUT", "uv run {script} INPUT OUTPUT --server http://HOST:8000")
SERVER_WHERE = "or on your own GPU machine, or against a server already running:"
SERVER_AS_TWIN = (
    "runs the same model through `vllm serve`: faster on the same GPU, and a page that fails stays one error row"
)
SHAPE_TEXT = {
    "offline": ShapeText(
        "runs the vLLM engine in-process (`vllm.LLM`) and feeds it batches of pages",
        "runs the same model in-process (`vllm.LLM`)",
        ("uv run {script} INPUT OUTPUT",),
        "or on your own GPU machine:",
    ),
    "server": ShapeText(
        "starts `vllm serve` when no server answers, then keeps a fixed window of pages in flight",
        SERVER_AS_TWIN,
        SERVER_RUNS,
        SERVER_WHERE,
    ),
    "saturate": ShapeText(
        "starts `vllm serve` when no server answers, then widens the window of pages in flight until the engine's "
        "queue fills or host memory says stop",
        SERVER_AS_TWIN,
        SERVER_RUNS,
        SERVER_WHERE,
    ),
}


def header(entry: Recipe, module: ModuleType, version: str, wheel_url: str, resolved: str) -> str:
    """The PEP 723 block: `hf jobs uv run` reads [tool.hf-jobs], so a model with a job command of its own (an
    image without uv) names no image there; uv reads [tool.uv], whose exclude-newer makes every job resolve the
    dependencies as of the release's date `resolved`."""
    facts = module.FACTS
    vllm = [f'#     "vllm=={facts.vllm_pin}; {VLLM_PLATFORMS}",'] if entry.shape == "offline" else []
    image = f"# {NO_IMAGE}" if facts.job_command else f'# image = "{facts.image}"'
    lines = [
        "# /// script",
        '# requires-python = ">=3.10"',
        "# dependencies = [",
        f'#     "{DISTRIBUTION}=={version}",',
        *vllm,
        "# ]",
        "#",
        "# [tool.uv]",
        f'# exclude-newer = "{resolved}"',
        "#",
        "# [tool.uv.sources]",
        f'# {DISTRIBUTION} = {{ url = "{wheel_url}" }}',
        "#",
        "# [tool.hf-jobs]",
        image,
        f'# flavor = "{facts.flavor}"',
        f'# timeout = "{DEFAULT_JOB_TIMEOUT}"',
        '# secrets = ["HF_TOKEN"]',
        "# ///",
    ]
    return "\n".join(lines) + "\n"


def wrapped(text: str) -> str:
    """A paragraph broken at spaces only: a file or package name (`lighton-ocr3-saturate.py`) stays whole."""
    return textwrap.fill(text, DOCSTRING_WIDTH, break_long_words=False, break_on_hyphens=False)


def shape_paragraph(entry: Recipe) -> str:
    text = f"This script {SHAPE_TEXT[entry.shape].drives}."
    if entry.twin:
        text += f" Its twin {entry.twin} {SHAPE_TEXT[recipe(entry.twin).shape].as_twin}."
    return wrapped(text)


def docstring(entry: Recipe, module: ModuleType) -> str:
    """The module's docstring around the script's own paragraphs: its first paragraph says what the model is, the
    rest why its facts are what they are."""
    summary, _, notes = (module.__doc__ or "").strip().partition("\n\n")
    if not notes:
        raise RenderRefused(
            f"{module.__file__}: its docstring needs two parts, the model in one line, then a blank line and why its "
            "facts are what they are"
        )
    shape = SHAPE_TEXT[entry.shape]
    runs = "\n".join(f"    {run.format(script=entry.script)}" for run in shape.local_runs)
    usage = (
        f"Run it on Hugging Face Jobs:\n    {job_command(entry.script, module.FACTS)}\n{shape.local_where}\n{runs}\n"
        "Run it without arguments for usage."
    )
    return '"""' + "\n\n".join([summary, shape_paragraph(entry), usage, notes, wrapped(CLOSING)]) + '\n"""\n'


def facts_source(module: ModuleType) -> tuple[str, bool]:
    """The module's `FACTS = ModelFacts(...)` as written, each name it uses prefixed by the module, and whether it
    names any (then the script imports the module)."""
    source = module.__loader__.get_source(module.__name__)
    statement = next(
        (
            node
            for node in ast.parse(source).body
            if isinstance(node, ast.Assign) and [ast.unparse(target) for target in node.targets] == ["FACTS"]
        ),
        None,
    )
    if statement is None or not (
        isinstance(statement.value, ast.Call) and ast.unparse(statement.value.func) == "ModelFacts"
    ):
        raise RenderRefused(f"{module.__file__}: state the model's facts as one FACTS = ModelFacts(...)")
    short = module.__name__.rpartition(".")[2]
    lines = source.splitlines(keepends=True)[statement.lineno - 1 : statement.end_lineno]
    names = sorted(
        (node for node in ast.walk(statement.value) if isinstance(node, ast.Name) and node is not statement.value.func),
        key=lambda node: (node.lineno, node.col_offset),
        reverse=True,
    )
    for name in names:
        if name.id not in vars(module):
            raise RenderRefused(
                f"{module.__file__}: FACTS names {name.id}, which the module does not define: define the hook there, "
                "or write the value itself"
            )
        row = name.lineno - statement.lineno
        line = lines[row].encode()  # ast's columns are UTF-8 byte offsets: a character before may take several
        prefixed = line[: name.col_offset] + f"{short}.{name.id}".encode() + line[name.end_col_offset :]
        lines[row] = prefixed.decode()
    return "".join(lines), bool(names)


def body(entry: Recipe, module: ModuleType) -> str:
    """The imports (the core's through its public face), FACTS and the call."""
    facts, names_hooks = facts_source(module)
    entry_point = getattr(ocr_core, f"run_{entry.shape}")
    imports = [f"from ocr_core import ModelFacts, {entry_point.__name__}"]
    if names_hooks:
        package, _, short = module.__name__.rpartition(".")
        imports.append(f"from {package} import {short}")
    call = f'if __name__ == "__main__":\n    raise SystemExit({entry_point.__name__}(FACTS, __file__))\n'
    return f"{NOQA}\n\n" + "\n".join(imports) + f"\n\n{facts}\n{call}"


def render(entry: Recipe, version: str, wheel_url: str, resolved: str) -> str:
    """The script `entry` names, as its model's module states it, pinned to core `version` at `wheel_url`, its
    dependencies resolved as of `resolved`."""
    module = model_module(entry.model)
    return header(entry, module, version, wheel_url, resolved) + docstring(entry, module) + body(entry, module)
