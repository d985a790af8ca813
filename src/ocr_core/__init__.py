"""Shared core of the vLLM OCR recipes (distribution `ocr-vllm-core`): each shipped script pins one version of it,
states its model's facts (`ModelFacts`) and calls its shape's entry (`run_offline`, `run_server`, `run_saturate`).

The names below are the core's public face: the scripts, bench/ and tools/ use these and no module path, so the
stage folders behind them (command, inputs, judging, store, serving, preparation, shapes, publishing, fanout) can
change without touching a caller.
"""

from .command.checks import parse_arguments
from .command.parser import build_parser
from .command.script_header import header_pins, read_header
from .entry import run_offline, run_saturate, run_server
from .facts import ModelFacts, Parsed
from .inputs.columns import INFO_COLUMN
from .inputs.images import cell_bytes, placeholder_part, prepare_image, reencode
from .inputs.pdf import (
    PDFIUM_LOCK,
    PREP_THREADS,
    PdfPage,
    RenderSize,
    open_document,
    pdfium,
    prepare_page,
    render_locked,
    render_size,
)
from .planning.defaults import OFFLINE_BATCH
from .planning.installed import installed_vllm_version
from .planning.job_commands import DEFAULT_JOB_TIMEOUT, job_command
from .planning.launch import Launch
from .planning.machine import Gpu, Machine, detect_machine
from .planning.make_plan import command_plan
from .planning.provenance import script_source
from .planning.scale import memory_utilization, plan_scale
from .preparation.job import prepare_job, release
from .preparation.ownership import WORK_DIR_ENV
from .publishing.outcome import publish
from .serving.chat import chat_body
from .shapes.drive_result import Drive
from .shapes.tally import Tally
from .store.compaction import compact
from .store.lease import Lease
from .store.mirror import ProgressMirror
from .store.output import Destination
from .store.progress import ResultLog, RowResult, finished_ids, part_files, read_results
from .version import DISTRIBUTION, RELEASE_TABLE

__all__ = [
    "DEFAULT_JOB_TIMEOUT",
    "DISTRIBUTION",
    "INFO_COLUMN",
    "OFFLINE_BATCH",
    "PDFIUM_LOCK",
    "PREP_THREADS",
    "RELEASE_TABLE",
    "WORK_DIR_ENV",
    "Destination",
    "Drive",
    "Gpu",
    "Launch",
    "Lease",
    "Machine",
    "ModelFacts",
    "Parsed",
    "PdfPage",
    "ProgressMirror",
    "RenderSize",
    "ResultLog",
    "RowResult",
    "Tally",
    "build_parser",
    "cell_bytes",
    "chat_body",
    "command_plan",
    "compact",
    "detect_machine",
    "finished_ids",
    "header_pins",
    "installed_vllm_version",
    "job_command",
    "memory_utilization",
    "open_document",
    "parse_arguments",
    "part_files",
    "pdfium",
    "placeholder_part",
    "plan_scale",
    "prepare_image",
    "prepare_job",
    "prepare_page",
    "publish",
    "read_header",
    "read_results",
    "reencode",
    "release",
    "render_locked",
    "render_size",
    "run_offline",
    "run_saturate",
    "run_server",
    "script_source",
]
