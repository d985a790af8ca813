"""What a run would take and cost before it runs (`--plan`): its pages at the rate measured for this recipe on this
machine's GPUs, priced like a run's summary prices its wall time (cost.py).

The rate is the `measured` figure of models.json that says `"plan_rate": true` for the script on hardware that names
the machine's GPUs ("1x H200, 16 cores, ..."): a sustained rate of the recipe's own default plan, one per script
and GPU kind. models.json lies beside the scripts in a clone and in a release's folder; a script run from its URL
alone has none, and the plan then says so instead of guessing a rate.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .cost import flavor_price, job_flavor, machine_flavor

MODELS_FILE = "models.json"


def measured_rate(script_path: Path, gpu: str | None, count: int) -> dict[str, Any] | None:
    """The plan-rate figure models.json records for this script on `count` GPUs of kind `gpu` (the plan's GPU table
    name, "H200"); None where there is no file beside the script or no such figure."""
    if gpu is None:
        return None
    try:
        entry = json.loads((script_path.parent / MODELS_FILE).read_text()).get(script_path.name) or {}
    except (OSError, ValueError):
        return None
    for figure in entry.get("measured", []):
        if figure.get("plan_rate") and figure.get("unit") == "pages/s" and names_gpus(figure["hardware"], gpu, count):
            return figure
    return None


def names_gpus(hardware: str, gpu: str, count: int) -> bool:
    """Whether a figure's hardware ("1x H200, 16 cores, ...", "l4x1") names `count` GPUs of this kind: "H20" is not
    "H200", nor "L4" "L40S"."""
    kind = re.escape(gpu.lower().replace(" ", "-"))
    found = re.search(rf"(?:(\d+)x[ -]?)?(?<![a-z0-9]){kind}(?![0-9a-z])(?:x(\d+))?", hardware.lower())
    return found is not None and int(found.group(1) or found.group(2) or 1) == count


def projected_run(
    script_path: Path,
    gpu: str | None,
    count: int,
    pages: int | None,
    price_per_hour: float | None,
) -> dict[str, Any]:
    """The run's pages at the measured rate, in hours and dollars (start-up not included); or why there is none."""
    if pages is None:
        return {"why": "the input's pages are not counted before the run"}
    figure = measured_rate(script_path, gpu, count)
    if figure is None:
        where = f"{count} x {gpu}" if gpu else "a machine without a GPU"
        return {"why": f"no rate measured for {script_path.name} on {where} ({MODELS_FILE} beside the script)"}
    seconds = pages / figure["value"]
    flavor, read = job_flavor(machine_flavor(gpu, count) or "") if gpu else ("", False)
    price = flavor_price(flavor, price_per_hour, "this job's flavor" if read else "the flavor of this machine's GPUs")
    projected: dict[str, Any] = {
        "pages": pages,
        "pages_per_s": figure["value"],
        "rate_measured": f"{figure['metric']} ({figure['hardware']}, {figure['date']}; {figure['source']})",
        "hours": round(seconds / 3600, 2),
        "startup": "not included: each start adds minutes (the summary's billed rate counts them)",
    }
    if price is None:
        return {**projected, "usd": None, "price_basis": "unknown flavor: pass --price-per-hour"}
    return {**projected, "usd": round(price.per_hour * seconds / 3600, 2), "price_basis": price.basis}
