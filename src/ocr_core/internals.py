"""The core's second face, for the project's own bench/ and tools/: the stage parts they measure or build with.

A recipe or a user composes only the package's face (`ocr_core`); a benchmark that times one stage (PDF
rendering, the progress store, a shard's publish) or a tool that renders the scripts and docs needs the parts
behind it. They import them from here, never from a module path, so the stage folders can change without
touching them. tests/test_layers.py fails when a name here has no such use, or is on the user's face too.
"""

from .command.checks import parse_arguments
from .command.parser import build_parser
from .command.script_header import header_pins, read_header
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
from .planning.job_commands import DEFAULT_JOB_TIMEOUT, job_command
from .planning.launch import Launch
from .planning.machine import Gpu, Machine
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
    "finished_ids",
    "header_pins",
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
    "script_source",
]
