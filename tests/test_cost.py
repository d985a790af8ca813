"""Cost in the summary and the card: dollars per 1,000 pages from the flavor's price and the measured wall time,
and for a sample the projected cost of the whole input. The arithmetic is tested as scenarios, the wiring through
a run against the fake vLLM server (the engine is not the point here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ocr_core.publishing.cost import (
    JOB_PRICES_DATE,
    JOB_PRICES_SOURCE,
    JOB_PRICES_USD_PER_HOUR,
    Price,
    cost_facts,
    describe_cost,
    run_price,
)
from ocr_models import RECIPES
from tests.test_resume_publish import SAMPLES, run_main, served
from tests.testbed.fake_server import fake_server

ROOT = Path(__file__).resolve().parent.parent
L4 = Price(0.80, "HF Jobs price of l4x1")


def test_models_json_carries_the_same_price_table_with_its_date_and_source():
    prices = json.loads((ROOT / "models.json").read_text())["_prices"]
    assert prices["usd_per_hour"] == JOB_PRICES_USD_PER_HOUR
    assert prices["date"] == JOB_PRICES_DATE and prices["source"] == JOB_PRICES_SOURCE


def test_every_recipe_flavor_has_a_price():
    models = json.loads((ROOT / "models.json").read_text())
    assert all(models[recipe.script]["flavor"] in JOB_PRICES_USD_PER_HOUR for recipe in RECIPES)


def test_an_hour_for_a_thousand_pages_costs_the_hourly_price():
    facts = cost_facts(L4, wall_s=3600.0, inference_s=3000.0, pages=1000, input_rows=None)
    assert facts["cost_usd"] == 0.8 and facts["usd_per_1000_pages"] == 0.8
    assert "projected_usd" not in facts


def test_a_sample_projects_start_up_once_and_the_pages_at_the_measured_rate():
    facts = cost_facts(L4, wall_s=600.0, inference_s=300.0, pages=100, input_rows=10_000)
    assert facts["usd_per_1000_pages"] == round(0.8 * 600 / 3600 / 100 * 1000, 4)
    assert facts["projected_pages"] == 10_000
    assert facts["projected_hours"] == round((300 + 10_000 * 3) / 3600, 2)
    assert facts["projected_usd"] == round(0.8 * (300 + 10_000 * 3) / 3600, 4)


def test_no_pages_no_rate_and_no_projection():
    facts = cost_facts(L4, wall_s=120.0, inference_s=0.0, pages=0, input_rows=500)
    assert facts["usd_per_1000_pages"] is None and "projected_usd" not in facts
    assert describe_cost(facts, "l4x1") is None


def test_price_per_hour_overrides_the_table(monkeypatch):
    monkeypatch.delenv("JOB_FLAVOR", raising=False)
    monkeypatch.delenv("ACCELERATOR", raising=False)
    assert run_price(1.25, "l4x1") == ("l4x1", Price(1.25, "--price-per-hour"))
    flavor, price = run_price(None, "l4x1")
    assert flavor == "l4x1" and price.per_hour == 0.8 and "recipe's flavor" in price.basis


def test_the_jobs_own_flavor_wins_and_an_unknown_one_asks_for_a_price(monkeypatch):
    monkeypatch.setenv("JOB_FLAVOR", "a100-large")
    flavor, price = run_price(None, "l4x1")
    assert flavor == "a100-large" and price.per_hour == 2.5 and "this job's flavor" in price.basis
    monkeypatch.setenv("JOB_FLAVOR", "quantum-large")
    assert run_price(None, "l4x1") == ("quantum-large", None)
    assert "--price-per-hour" in cost_facts(None, 60.0, 30.0, 10, None)["price_basis"]


@pytest.mark.parametrize("price_flag", [[], ["--price-per-hour", "3.6"]])
def test_a_sample_run_prints_its_cost_and_the_whole_inputs(tmp_path, capsys, monkeypatch, price_flag):
    monkeypatch.delenv("JOB_FLAVOR", raising=False)
    monkeypatch.delenv("ACCELERATOR", raising=False)
    out = tmp_path / "out"
    with fake_server() as server:
        argv = [str(SAMPLES), str(out), *served(server), "--max-samples", "6", *price_flag]
        code, summary, _ = run_main("ovis-ocr2-server.py", argv, capsys)
    assert code == 0
    per_hour = 3.6 if price_flag else 0.8
    assert summary["flavor"] == "l4x1" and summary["price_per_hour"] == per_hour
    assert summary["cost_usd"] == pytest.approx(per_hour * summary["wall_s"] / 3600, abs=1e-3)
    assert summary["usd_per_1000_pages"] == pytest.approx(per_hour * summary["wall_s"] / 3600 / 6 * 1000, abs=1e-3)
    assert summary["projected_pages"] == 12 and summary["projected_usd"] >= 0
    card = (out / "README.md").read_text()
    if not price_flag:  # off HF Jobs the flavor is only assumed, so the card names no price (issue 24)
        assert "| cost |" not in card
        return
    assert f"| cost | ${summary['usd_per_1000_pages']:.2f} per 1,000 pages (l4x1 at ${per_hour:.2f}/h" in card
    assert "all 12 input pages" in card
