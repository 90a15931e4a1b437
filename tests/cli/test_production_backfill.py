"""``ragspine-eval production backfill``: the summaries of a new deployment's earlier days, written where
the nightly asset writes them, so that the first real night's drop tests have trailing nights."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.cli.production import _config
from ragspine_pipeline.contracts.columns import load_evidence
from ragspine_pipeline.redaction import redact_line, redact_trace
from ragspine_pipeline.scoring.refusal import mark_refusals
from ragspine_pipeline.scoring.significance import drop_tests
from ragspine_pipeline.sources.objects import ObjectFolder
from ragspine_pipeline.sources.production_nights import (
    night_summary,
    read_summaries,
    sample_traces,
    summaries_folder,
)
from ragspine_pipeline.sources.sampling import sample_day
from ragspine_pipeline.sources.trace_store import open_trace_store

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_drift_alarms.py"
DAYS = 16
SEED = 7


def _bench():
    spec = importlib.util.spec_from_file_location("bench_drift_alarms", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """16 days of synthetic traffic (2 slices of 100 traces a day) and the evidence registry."""
    bench = _bench()
    root = tmp_path_factory.mktemp("deployment")
    traffic = bench.Traffic(slices=2, per_slice=100)
    days = [(bench.FIRST + timedelta(days=night)).isoformat() for night in range(DAYS)]
    for night, day in enumerate(days):
        folder = root / "traces" / f"dt={day}"
        folder.mkdir(parents=True)
        (folder / "part-00000.jsonl").write_text("\n".join(traffic.day_lines(night)) + "\n")
    evidence = bench.write_registry(root / "evidence.jsonl")
    return root, days, evidence


def _backfill(root: Path, evidence: Path, until: str, days: int = 14, *more: str) -> list[str]:
    return [
        *("production", "backfill", "--days", str(days), "--until", until),
        *("--store", str(root / "traces"), "--reports", str(root / "reports")),
        *("--evidence", str(evidence), "--sample-size", "200", *more),
    ]


@pytest.mark.system  # a week of nights scored and sampled
def test_a_backfill_gives_the_next_night_its_trailing_nights(deployment, capsys, monkeypatch):
    monkeypatch.delenv("RAGSPINE_GATES_CONFIG", raising=False)
    monkeypatch.delenv("RAGSPINE_SAMPLE_STRATIFY", raising=False)
    root, days, evidence = deployment
    filled = days[1:15]  # the 14 days up to day 15; day 16 is the first real night

    assert main(_backfill(root, evidence, days[14])) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{day}: 200 sampled, summary written" for day in filled]
    folder = summaries_folder(ObjectFolder(root / "reports"))
    assert folder.names(".json") == [f"{day}.json" for day in filled]
    last = json.loads((root / "reports" / "production" / f"{filled[-1]}.json").read_text())
    assert last["day"] == filled[-1] and last["n"] == 200 and last["sample_size"]["size"] == 200
    assert last["drop_tests"]  # each day tested against the days filled before it

    # Day 16, as the nightly asset scores it, against the summaries read back as it reads them.
    config = _config(None, {})
    settings = config.production
    store = open_trace_store(str(root / "traces"))
    sample = sample_day(
        store, days[15], n=200, seed=SEED, quarantine=None, redact=redact_trace, redact_text=redact_line
    )
    traces = sample_traces(sample.records, root)
    traces = mark_refusals(traces, config.refusals.phrases, config.refusals.patterns)
    today = night_summary(days[15], traces, load_evidence(evidence).table, config.required_versions)
    history = read_summaries(folder, days=settings.history_nights, before=days[15])
    assert [night["day"] for night in history] == filled
    night = drop_tests(today, history, settings)
    assert night.tested
    all_traffic = [t for t in night.tests if t.slice == "all traffic"]
    assert any(t.tested for t in all_traffic)
    assert not [
        t.reason for t in all_traffic if "needed" in t.reason
    ]  # "trailing night(s), at least 5 needed"

    # Again without --force: every day has its summary. With --force the day is filled again, the same.
    assert main(_backfill(root, evidence, days[14])) == 0
    assert capsys.readouterr().out.splitlines() == [f"{day}: skipped: a summary exists" for day in filled]
    kept = (root / "reports" / "production" / f"{days[14]}.json").read_text()
    assert main(_backfill(root, evidence, days[14], 1, "--force")) == 0
    assert capsys.readouterr().out.splitlines() == [f"{days[14]}: 200 sampled, summary written"]
    assert (root / "reports" / "production" / f"{days[14]}.json").read_text() == kept


def test_days_without_traces_and_unusable_input(deployment, capsys, tmp_path):
    root, days, evidence = deployment
    args = ["production", "backfill", "--store", str(root / "traces"), "--reports", str(tmp_path)]
    args += ["--evidence", str(evidence), "--sample-size", "50"]
    assert main([*args, "--days", "2", "--until", days[0]]) == 0
    day_before = (date.fromisoformat(days[0]) - timedelta(days=1)).isoformat()
    assert capsys.readouterr().out.splitlines() == [
        f"{day_before}: no traces",
        f"{days[0]}: 50 sampled, summary written",
    ]
    assert main([*args, "--days", "1", "--until", "2026-02-30"]) == 2
    assert "--until" in capsys.readouterr().err
    assert main([*args, "--days", "1", "--evidence", str(tmp_path / "missing.jsonl")]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    for days_ in ("0", "91"):
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--days", days_])
        assert exit_.value.code == 2


def test_the_defaults_are_the_code_locations():
    from ragspine_pipeline.cli.parser import build_parser
    from ragspine_pipeline.cli.production import DEFAULT_REPORTS, DEFAULT_SAMPLE_SIZE
    from ragspine_pipeline.defs.resources import EvalFiles
    from tests.defs.declared import demo_service

    args = build_parser().parse_args(["production", "backfill", "--days", "1"])
    assert args.seed == EvalFiles.model_fields["production_seed"].default
    files = demo_service({}).files
    assert files.production_sample_size == DEFAULT_SAMPLE_SIZE
    assert files.reports_dir == str(Path(DEFAULT_REPORTS).absolute())
