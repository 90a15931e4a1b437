"""The nightly asset with a sample-size target in the gates config (``production: {sample: ...}``): the
night is sampled with the size the previous nights' summaries imply (``sample_plan.nightly_sample_plan``),
capped by ``max``; the asset's metadata and the night's summary say which size and why, and warn when
the target is out of reach."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import yaml

import ragspine_pipeline
from ragspine_pipeline.defs.local import backfill_production
from ragspine_pipeline.scoring import sample_plan
from ragspine_pipeline.scoring.drop_settings import DropSettings
from tests.defs.test_production_drops import TRACES, nightly_definitions, write_day

FIRST = date(2026, 11, 1)
FIXED = 100  # RAGSPINE_SAMPLE_SIZE of these tests
NIGHTS = 8


def _night(day: date, compliance: float) -> dict:
    k = round(compliance * TRACES)
    entry = {"value": k / TRACES, "n": TRACES, "successes": k}
    return {"day": day.isoformat(), "n": TRACES, "metrics": {"production_compliance": entry}}


def _run(tmp_path: Path, sample: dict, rates: list[float]) -> tuple[dict, dict, list[dict]]:
    """Earlier nights' summaries at ``rates``, then one night of traces sampled under ``sample``: the
    night's summary, the nightly asset's metadata and the summaries it was sized from."""
    gates = yaml.safe_load((Path(ragspine_pipeline.__file__).parent / "demo" / "gates.yaml").read_text())
    gates["production"] = {**gates.get("production", {}), "sample": sample}
    (tmp_path / "gates.yaml").write_text(yaml.safe_dump(gates))
    folder = tmp_path / "reports" / "production"
    folder.mkdir(parents=True)
    days = [FIRST + timedelta(days=i) for i in range(NIGHTS + 1)]
    history = [_night(day, rate) for day, rate in zip(days, rates, strict=False)]
    for night in history:
        (folder / f"{night['day']}.json").write_text(json.dumps(night))
    write_day(tmp_path / "traces", days[NIGHTS], 0.95, np.random.default_rng(3))
    defs = nightly_definitions(tmp_path, FIXED, RAGSPINE_GATES_CONFIG=str(tmp_path / "gates.yaml"))
    with dg.instance_for_test() as instance:
        (run,) = backfill_production(defs, instance, [days[NIGHTS].isoformat()])
        assert run.success
        event = instance.get_latest_materialization_event(dg.AssetKey("production_metrics"))
        metadata = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    summary = json.loads((folder / f"{days[NIGHTS]}.json").read_text())
    return summary, metadata, history


def test_the_night_is_sampled_with_the_size_the_target_needs_capped_by_max(tmp_path):
    sample = {"detect": 0.05, "rate": "production_compliance", "max": 300}
    summary, metadata, history = _run(tmp_path, sample, [0.95] * NIGHTS)
    settings = DropSettings.model_validate({"sample": sample})
    plan = sample_plan.nightly_sample_plan(history, settings, FIXED)
    assert plan.reason == "capped" and plan.need.traces > 300 and plan.size == 300
    assert summary["n"] == 300 < TRACES  # the night's sample is the planned size, not RAGSPINE_SAMPLE_SIZE
    assert summary["sample_size"] == json.loads(json.dumps(plan.to_dict()))
    assert summary["sample_size"]["tau2"] == 0 and summary["sample_size"]["rate"] == "production_compliance"
    assert metadata["sample_size"] == 300 and "the max" in metadata["sample_size_why"]
    assert metadata["sample_plan"]["needed"] == plan.need.traces
    assert "sample_size_warning" not in metadata


def test_an_unreachable_target_warns_and_samples_max(tmp_path):
    sample = {"detect": 0.01, "rate": "production_compliance", "max": 350}
    summary, metadata, _ = _run(tmp_path, sample, [0.90, 0.99] * (NIGHTS // 2))
    assert summary["n"] == 350 and summary["sample_size"]["reason"] == "unreachable"
    warning = metadata["sample_size_warning"]
    assert "production_compliance" in warning and "best reachable" in warning
    assert summary["sample_size"]["warning"] == warning and summary["sample_size"]["best_drop"] > 0.01
