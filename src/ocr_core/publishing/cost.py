"""What a run cost, per 1,000 pages, and what the whole input would cost: users otherwise learn it from the bill.

HF Jobs bill a flavor's hourly price by the minute while the job starts and runs, so the cost is the price times the
measured wall time, start-up included (pulling the image and loading the model are paid for like pages are). The
price comes from the flavor the job runs on (read from the job's environment, else the recipe's own flavor, which
its job command uses) in the table below, copied from the HF Jobs pricing page; models.json carries the same table
with its date and source, and a test keeps the two equal. `--price-per-hour` replaces it (another provider, a
discount, your own GPU). A sample run (--max-samples) also projects the whole input: its start-up once, plus every
page at the sample's measured rate.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

JOB_PRICES_DATE = "2026-11-30"
JOB_PRICES_SOURCE = "https://huggingface.co/docs/hub/jobs-pricing"
JOB_PRICES_USD_PER_HOUR = {
    "cpu-basic": 0.01,
    "cpu-upgrade": 0.03,
    "cpu-xl": 1.00,
    "cpu-performance": 1.90,
    "t4-small": 0.40,
    "t4-medium": 0.60,
    "l4x1": 0.80,
    "l4x4": 3.80,
    "l40sx1": 1.80,
    "l40sx4": 8.30,
    "l40sx8": 23.50,
    "a10g-small": 1.00,
    "a10g-large": 1.50,
    "a10g-largex2": 3.00,
    "a10g-largex4": 5.00,
    "a100-large": 2.50,
    "a100x4": 10.00,
    "a100x8": 20.00,
    "h200": 5.00,
    "h200x2": 10.00,
    "h200x4": 20.00,
    "h200x8": 40.00,
    "rtx-pro-6000": 2.75,
    "rtx-pro-6000x2": 5.50,
    "rtx-pro-6000x4": 11.00,
    "rtx-pro-6000x8": 22.00,
}
JOB_FLAVOR_ENV = ("ACCELERATOR", "JOB_FLAVOR")


@dataclass(frozen=True)
class Price:
    """An hourly price and where it comes from, so the summary says what it assumed."""

    per_hour: float
    basis: str


def job_flavor(recipe_flavor: str) -> tuple[str, bool]:
    """The flavor this job runs on when its environment names one, else the recipe's; and whether it was read."""
    found = next((os.environ[name] for name in JOB_FLAVOR_ENV if os.environ.get(name)), None)
    return (found, True) if found else (recipe_flavor, False)


def run_price(price_per_hour: float | None, recipe_flavor: str) -> tuple[str, Price | None]:
    """The flavor and the hourly price the cost is computed from; no price for a flavor the table lacks."""
    flavor, read = job_flavor(recipe_flavor)
    where = "this job's flavor" if read else "the recipe's flavor; pass --price-per-hour for another"
    return flavor, flavor_price(flavor, price_per_hour, where)


def flavor_price(flavor: str, price_per_hour: float | None, where: str) -> Price | None:
    """A flavor's hourly price, `--price-per-hour` first; None for a flavor the table lacks. `where` says how the
    flavor was learnt (the job's environment, the recipe, a launcher's --flavor)."""
    if price_per_hour is not None:
        return Price(price_per_hour, "--price-per-hour")
    if flavor not in JOB_PRICES_USD_PER_HOUR:
        return None
    return Price(JOB_PRICES_USD_PER_HOUR[flavor], f"HF Jobs price of {flavor} ({where}), {JOB_PRICES_DATE}")


def machine_flavor(gpu: str, count: int) -> str | None:
    """The HF Jobs flavor of `count` GPUs of one kind (`gpu` as the plan's GPU table names it: "H200", "L4"), where
    the price table has one: h200, h200x2, l4x1, a100-large."""
    name = re.escape(gpu.lower().replace(" ", "-"))
    suffix = rf"x{count}" if count > 1 else r"(x1)?(-[a-z]+)?"
    return next((flavor for flavor in JOB_PRICES_USD_PER_HOUR if re.fullmatch(name + suffix, flavor)), None)


def price_known(price_per_hour: float | None, recipe_flavor: str) -> bool:
    """Whether the machine's price is known (given, or the job's own flavor), not assumed from the recipe's flavor:
    the card states only what is known, so a CPU run on a laptop carries no L4 price."""
    return price_per_hour is not None or job_flavor(recipe_flavor)[1]


def cost_facts(
    price: Price | None, wall_s: float, inference_s: float, pages: int, input_rows: int | None
) -> dict[str, Any]:
    """The summary's cost fields: this run's dollars, per 1,000 of its pages, and (for a sample) the whole input's.

    `input_rows` is the size of the whole input when this run was a sample of it, else None. The projection pays
    this run's start-up and other time outside the page flow once, and the rest at its measured pages/s.
    """
    if price is None:
        return {"price_per_hour": None, "price_basis": "unknown flavor: pass --price-per-hour", "cost_usd": None}
    facts: dict[str, Any] = {
        "price_per_hour": price.per_hour,
        "price_basis": price.basis,
        "cost_usd": round(price.per_hour * wall_s / 3600, 6),
        "usd_per_1000_pages": round(price.per_hour * wall_s / 3600 / pages * 1000, 4) if pages else None,
    }
    if input_rows and pages and inference_s > 0:
        overhead_s = max(0.0, wall_s - inference_s)
        projected_s = overhead_s + input_rows * inference_s / pages
        facts["projected_pages"] = input_rows
        facts["projected_usd"] = round(price.per_hour * projected_s / 3600, 4)
        facts["projected_hours"] = round(projected_s / 3600, 2)
    return facts


def describe_cost(facts: dict[str, Any], flavor: str) -> str | None:
    """One line for the card, or None when no price is known."""
    if facts.get("usd_per_1000_pages") is None:
        return None
    line = (
        f"${facts['usd_per_1000_pages']:.2f} per 1,000 pages ({flavor} at ${facts['price_per_hour']:.2f}/h, wall "
        "time with start-up)"
    )
    if "projected_usd" in facts:
        line += f"; all {facts['projected_pages']} input pages: about ${facts['projected_usd']:.2f}"
    return line
