"""What OUTPUT may be, checked before anything is written: a local folder or a Hub repo, a folder that is the
results' own (not a file, the home or current folder, nor the input), and what to say when it holds files this
tool did not write (layout.foreign_files finds them)."""

from __future__ import annotations

from pathlib import Path

LISTED_FOREIGN = 5


def is_local_output(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or Path(spec).expanduser().exists()


def unsafe_local_output(spec: str, input_spec: str) -> str | None:
    """Why a local folder must not be OUTPUT (publishing would write over files that are not ours, or it cannot be
    a folder at all), or None."""
    target = Path(spec).expanduser().resolve()
    blocking = next((path for path in (target, *target.parents) if path.exists()), None)
    if blocking is not None and not blocking.is_dir():
        where = "is a file" if blocking == target else f"lies inside {str(blocking)!r}, which is a file"
        return f"OUTPUT {spec!r} {where}; give the results a folder of their own, e.g. ./scans-ocr"
    named = {Path(target.anchor): "the root folder", Path.home().resolve(): "your home folder"}
    named[Path.cwd().resolve()] = "the current folder"
    if target in named:
        return f"OUTPUT {spec!r} is {named[target]}; give the results a folder of their own, e.g. ./scans-ocr"
    source = Path(input_spec).expanduser()
    if source.exists():
        source = source.resolve()
        if target == source or source in target.parents or target in source.parents:
            return f"OUTPUT {spec!r} is, holds or lies inside INPUT {input_spec!r}; write the results elsewhere"
    return None


def foreign_message(where: str, files: list[str], configs: list[str]) -> str:
    found = []
    if files:
        more = f" and {len(files) - LISTED_FOREIGN} more" if len(files) > LISTED_FOREIGN else ""
        listed = ", ".join(files[:LISTED_FOREIGN]) + more
        found.append(f"files this tool did not write ({listed})")
    if configs:
        found.append(f"configs this tool did not write ({', '.join(configs)})")
    return (
        f"OUTPUT {where} holds {' and '.join(found)}; publishing there could replace or hide them. Choose another "
        "OUTPUT, or pass --overwrite to publish this run's config there anyway."
    )
