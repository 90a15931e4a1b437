"""The embedded demo: idempotent init, frozen golden set, production traces, healthy vs degraded index."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision import golden
from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS, evaluate
from ragspine_pipeline.demo.build import GOLDEN_VERSION, init_demo, rebuild_index, replay_golden
from ragspine_pipeline.demo.corpus import GOLDEN_CASES, chunk_rows
from ragspine_pipeline.demo.finance import FINANCE_CASES, WORKFLOW
from ragspine_pipeline.demo.reference_outcome import REFUSAL

TODAY = date(2026, 11, 23)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    return init_demo(root, today=TODAY, traces_per_day=40)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def decide(root: Path, traces: list[dict], tmp_path: Path):
    trace_file = tmp_path / "golden-traces.jsonl"
    trace_file.write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    config = load_config(root / "gates.yaml", KNOWN_METRICS)
    return evaluate(
        load_gold(root / "golden" / "gold.jsonl").table,
        load_traces(trace_file).table,
        gates=config.gate_list(KNOWN_METRICS),
        config=config,
        run_id="test",
        evidence=load_evidence(root / "evidence.jsonl").table,
        lock=golden.read_lock(root / "golden" / "gold.jsonl"),
    )


def test_init_twice_changes_nothing(tmp_path):
    first = init_demo(tmp_path, today=TODAY, traces_per_day=15)
    before = snapshot(tmp_path)
    second = init_demo(tmp_path, today=TODAY, traces_per_day=15)
    assert first.changed and not second.changed
    assert snapshot(tmp_path) == before
    # A day's file depends on its date only: the next day rewrites nothing it already wrote.
    later = init_demo(tmp_path, today=date(2026, 11, 24), traces_per_day=15)
    assert later.changed
    assert all(snapshot(tmp_path)[name] == data for name, data in before.items())


def test_golden_set_is_large_spread_and_frozen(demo):
    assert sum(demo.golden_cases.values()) >= 60
    assert len(demo.golden_cases) >= 4 and min(demo.golden_cases.values()) >= 10
    gold = load_gold(demo.golden).table.to_pydict()
    assert not all(gold["answerable"])
    assert any(len(ids) == 2 for ids in gold["gold_citations"])  # multi-source cases
    verification = golden.verify(demo.golden)
    assert verification.status == "ok"
    assert verification.lock.version == GOLDEN_VERSION


def test_golden_cases_point_at_visible_chunks_and_their_points():
    rows = {row["chunk_id"]: row for row in chunk_rows()}
    for case in GOLDEN_CASES:
        points = set()
        for chunk_id in case["required_source_ids"]:
            assert rows[chunk_id]["permitted"] and rows[chunk_id]["current"], case["case_id"]
            points |= {p["point"] for p in rows[chunk_id]["points"]}
        assert set(case["required_points"]) <= points, case["case_id"]
        assert case["answerable"] == bool(case["required_source_ids"])


def test_finance_cases_expect_what_their_required_chunks_state():
    rows = {row["chunk_id"]: row for row in chunk_rows()}
    assert {case["tags"]["workflow"] for case in FINANCE_CASES} == {WORKFLOW}
    assert {case["case_type"] for case in FINANCE_CASES} == {
        "numeric", "clarification", "refusal", "narrative", "composite"
    }  # fmt: skip
    for case in FINANCE_CASES:
        expected, sources = case["expected"], [rows[i] for i in case["required_source_ids"]]
        assert case["reference_date"] and {"difficulty", "qtype"} <= set(case["tags"])
        assert case["answerable"] is not expected["refuse"]
        if "value" in expected:
            stated = [
                (f["value"], f["unit"], {"doc": f["doc"], "locator": f["locator"]})
                for row in sources
                for f in row["figures"]
            ]
            assert (expected["value"], expected["unit"], expected["source"]) in stated, case["case_id"]
        if "narrative_doc" in expected:
            assert expected["narrative_doc"] in {row["doc"] for row in sources if not row["figures"]}


def test_finance_figures_are_stated_by_their_sentences():
    finance = [row for row in chunk_rows() if row["workflow"] == WORKFLOW]
    assert any(not row["permitted"] for row in finance) and any(not row["current"] for row in finance)
    for row in finance:
        for figure in row["figures"]:
            sentence = row["points"][figure["sentence"]]["sentence"]
            assert figure["doc"] == row["doc"] and figure["locator"].startswith(row["locator"].split(",")[0])
            for word in (figure["metric"], figure["scope"], figure["period"], f"{figure['value']:.1f}"):
                assert word.lower() in sentence.lower(), (row["chunk_id"], word)


def test_corpus_has_restricted_and_stale_chunks(demo):
    assert demo.n_restricted > 0 and demo.n_stale > 0
    registry = load_evidence(demo.evidence).table.to_pydict()
    assert len(registry["chunk_id"]) == demo.n_chunks
    assert not all(registry["permitted"]) and not all(registry["current"])
    corpus = [json.loads(line) for line in demo.corpus.read_text().splitlines()]
    for row in corpus:
        assert " ".join(p["sentence"] for p in row["points"]) == row["text"]


def test_seven_days_of_production_traces(demo):
    partitions = sorted(p.name for p in demo.traces.iterdir())
    assert partitions == [f"dt={day.isoformat()}" for day in demo.days]
    files = [next((demo.traces / name).iterdir()) for name in partitions]
    assert sum(f.name.endswith(".jsonl.gz") for f in files) == 1
    bad_days = 0
    for f in files:
        data = f.read_bytes()
        lines = (gzip.decompress(data) if f.suffix == ".gz" else data).decode().splitlines()
        assert len(lines) == demo.traces_per_day[f.parent.name[3:]]
        parsed = []
        for line in lines:
            try:
                parsed.append(json.loads(line))
            except json.JSONDecodeError:
                parsed.append(None)
        if None in parsed:
            bad_days += 1
            assert any(isinstance(r, dict) and isinstance(r["selected_context_ids"], str) for r in parsed)
            ids = [r["request_id"] for r in parsed if r is not None]
            assert len(ids) > len(set(ids))  # a retried request
            continue
        assert {tuple(r["tags"]) for r in parsed} == {("workflow", "channel", "region")}
        assert all(r["outcome"]["refused"] == (r["answer"]["claim"] == REFUSAL) for r in parsed)
        assert {r["outcome"]["clarification_mode"] for r in parsed} == {"none"}
        assert len({r["request_id"] for r in parsed}) == len(parsed)
        assert [r["ts"] for r in parsed] == sorted(r["ts"] for r in parsed)
        assert all(r["ts"].startswith(f.parent.name[3:]) for r in parsed)
        if f.suffix != ".gz":
            assert load_traces(f).table.num_rows == len(parsed)
    assert bad_days == 1


def test_healthy_index_ships_with_realistic_imperfection(demo, tmp_path):
    result = decide(demo.root, replay_golden(demo.root, ts=0), tmp_path)
    assert result.release.decision == "ship", result.release.failed_gates
    assert result.release.index_version == "demo-ix-0001"
    assert 0.85 <= result.metrics["releasable_rate"] < 1.0
    assert result.metrics["admissible_rate"] == 1.0
    # The finance slice answers as its RAGSpine expectations say, and its layered cases release.
    assert {name: gate.pass_rate for name, gate in result.qa.gates.items()} == {
        "numeric_accuracy": 1.0,
        "citation_validity": 1.0,
        "refusal_appropriateness": 1.0,
        "clarification_appropriateness": 1.0,
        # RAGSpine's narrative gate: every claim within the retrieved context
        "narrative_faithfulness": 1.0,
    }
    assert result.metrics["narrative_faithfulness"] == 1.0  # beside the layered claim_faithfulness
    assert result.qa.gates["refusal_appropriateness"].total == len(FINANCE_CASES)
    assert result.qa.fabrication.count == 0
    finance = next(s for s in result.slices if (s.dimension, s.value) == ("workflow", WORKFLOW))
    assert finance.n == len(FINANCE_CASES) and finance.releasable_rate >= 0.75


def test_degraded_rebuild_blocks_and_a_healthy_one_recovers(tmp_path):
    root = tmp_path / "demo"
    init_demo(root, today=TODAY, traces_per_day=5)
    now = datetime(2026, 11, 23, 6, tzinfo=UTC)

    degraded = rebuild_index(root, degraded=True, now=now)
    assert degraded["index_version"] == "demo-ix-0002-degraded"
    assert degraded["engine"]["enforce_acl"] is False
    blocked = decide(root, replay_golden(root, ts=0), tmp_path)
    failed = {gate.metric for gate in blocked.release.failed_gates}
    assert blocked.release.decision == "block"
    assert {"admissible_rate", "context_recall", "candidate_recall"} <= failed
    assert blocked.release.failed_slices
    # The QA gates see it too: a superseded figure, a leaked restricted one stated instead of a refusal.
    assert blocked.metrics["numeric_accuracy"] < 1.0 and blocked.metrics["refusal_appropriateness"] < 1.0
    assert [case["id"] for case in blocked.qa.fabrication.to_dict()["cases"]] == ["FIN-10"]

    # A re-run of init keeps the published index.
    assert not init_demo(root, today=TODAY, traces_per_day=5).changed
    assert (
        json.loads((root / "index" / "manifest.json").read_text())["index_version"] == "demo-ix-0002-degraded"
    )

    healthy = rebuild_index(root, now=now)
    assert healthy["index_version"] == "demo-ix-0003"
    assert decide(root, replay_golden(root, ts=0), tmp_path).release.decision == "ship"


def test_init_republishes_the_index_when_its_corpus_hash_is_stale(tmp_path):
    init_demo(tmp_path, today=TODAY, traces_per_day=5)
    manifest_path = tmp_path / "index" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["corpus_hash"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    assert init_demo(tmp_path, today=TODAY, traces_per_day=5).changed
    republished = json.loads(manifest_path.read_text())
    assert republished["index_version"] == "demo-ix-0002"
    assert republished["corpus_hash"] != "0" * 64
