"""How many pages a run would read, where that is cheap to know before it runs (`--plan`): a local PDF, folder of
images and PDFs, or folder of parquet files is counted from its files (PDF page counts and parquet footers); a Hub
dataset is never asked (the plan makes no Hub call) and other local formats are not opened, each with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .addresses import LOCAL_PREFIXES
from .files import frame_count, page_files
from .pdf import PDF_SUFFIX
from .pdf_rows import counted_pages
from .selection import select_rows, shard_span
from .source import InputSelection, local_files, parquet_rows


def input_pages(wanted: InputSelection) -> dict[str, Any]:
    """The input's rows, and how many of them this run covers (--max-samples, --shard); or why they are not counted."""
    rows, how = counted_rows(wanted)
    if rows is None:
        return {"rows": None, "why": how}
    selected = len(select_rows(rows, wanted.max_samples, wanted.shuffle, wanted.seed))
    return {"rows": rows, "this_run": len(shard_span(selected, wanted.shard)), "counted": how}


def counted_rows(wanted: InputSelection) -> tuple[int | None, str]:
    """The input's rows (one per image, one per PDF page) and how they were counted, or None and why not."""
    if not wanted.name.startswith(LOCAL_PREFIXES) and not Path(wanted.name).exists():
        return None, "a Hub dataset: --plan makes no Hub call, so its rows are counted when the run opens it"
    path = Path(wanted.name).expanduser()
    if not path.exists():
        return None, f"{wanted.name} does not exist here"
    files = page_files(path)
    if files is not None:
        return sum(file_rows(files)), "each image, each TIFF frame and each PDF page"
    if path.is_dir() and not (path / "state.json").exists() and not (path / "dataset_dict.json").exists():
        return parquet_split_rows(path, wanted)
    return None, "a saved dataset: --plan does not open it; the run counts its rows"


def file_rows(files: list[Path]) -> list[int]:
    """Each page file's rows, by the rule the run reads them with (inputs/files.py): a PDF its pages, a multi-page
    TIFF its frames, any other image one."""
    pdfs = [(str(file), file.name) for file in files if file.suffix.lower() == PDF_SUFFIX]
    others = [frame_count(file) or 1 for file in files if file.suffix.lower() != PDF_SUFFIX]
    return [*counted_pages(pdfs, []), *others]


def parquet_split_rows(path: Path, wanted: InputSelection) -> tuple[int | None, str]:
    """The split's rows from its parquet files' footers; None for a folder of other data files."""
    try:
        files = local_files(path, wanted.config).get(wanted.split, [])
    except Exception as exc:
        return None, f"its files could not be listed ({type(exc).__name__}); the run reports the problem"
    if not files or not all(file.endswith(".parquet") for file in files):
        return None, "data files other than parquet: --plan does not read them; the run counts their rows"
    return sum(parquet_rows(file) for file in files), "the parquet files' footers"
