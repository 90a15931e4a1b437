"""`ragspine-eval score` as a release gate: layered evidence, slices, golden lock, baseline ratchet."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.decision.causes import cause_sentence
from ragspine_pipeline.demo.build import init_demo, rebuild_index, replay_golden

REGISTRY = [
    {"chunk_id": "pol-1#1", "version": "v1", "permitted": True, "current": True,
     "text": "Release freezes start on the last Friday of the quarter."},
    {"chunk_id": "pol-1#2", "version": "v1", "permitted": True, "current": True,
     "text": "The release manager approves any freeze exception in writing."},
    {"chunk_id": "acc-3#1", "version": "v2", "permitted": True, "current": True,
     "text": "Access to production requires a ticket approved by the service owner."},
    {"chunk_id": "hr-9#1", "version": "v1", "permitted": False, "current": True,
     "text": "Salary bands for engineering managers."},
]  # fmt: skip
GOOD = {
    "release-freeze": (
        "pol-1#2",
        "The release manager approves any freeze exception.",
        "release manager approves",
    ),
    "access": (
        "acc-3#1",
        "Production access requires a ticket approved by the service owner.",
        "ticket approved",
    ),
}


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def build(tmp_path: Path, per_workflow: dict[str, int], broken: set[str] = frozenset()):
    """Gold, traces and registry: every case correct unless its id is in ``broken`` (a restricted leak)."""
    gold, traces = [], []
    for workflow, count in per_workflow.items():
        chunk, text, point = GOOD[workflow]
        for i in range(count):
            qid = f"{workflow}-{i:02d}"
            gold.append({"case_id": qid, "question": f"Question {qid}?", "required_source_ids": [chunk],
                         "required_points": [point], "tags": {"workflow": workflow}})  # fmt: skip
            first = [chunk, "pol-1#1"] + (["hr-9#1"] if qid in broken else [])
            traces.append({
                "case_id": qid, "first_stage_ids": first, "selected_context_ids": [chunk],
                "selected_versions": [next(r["version"] for r in REGISTRY if r["chunk_id"] == chunk)],
                "versions": {"retriever": "hybrid-3", "index": "ix-2026-11-20", "sparse": "bm25-3",
                             "dense": "e5-2", "fusion": "rrf-1", "reranker": "ce-1"},
                "answer": {"claims": [{"claim_id": "c1", "text": text, "citation_id": chunk,
                                       "support_phrases": [point], "answer_point": point}]},
            })  # fmt: skip
    return (
        write_jsonl(tmp_path / "gold.jsonl", gold),
        write_jsonl(tmp_path / "traces.jsonl", traces),
        write_jsonl(tmp_path / "evidence.jsonl", REGISTRY),
    )


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def score(capsys, gold, traces, evidence, *extra):
    code, out, err = run(capsys, "score", "--gold", gold, "--trace", traces, "--evidence", evidence,
                         "--gates", "precision=0.5", *extra)  # fmt: skip
    return code, (json.loads(out) if out.startswith("{") else out), err


def test_a_healthy_release_ships_with_layered_output(tmp_path, capsys):
    gold, traces, evidence = build(tmp_path, {"release-freeze": 3, "access": 2})
    code, report, _ = score(capsys, gold, traces, evidence)
    assert code == 0 and report["release"]["decision"] == "ship" and report["pass"] is True
    assert report["first_failed_stage_histogram"]["pass"] == 5
    assert {case["first_failed_stage"] for case in report["cases"]} == {"pass"}
    assert all(case["releasable"] and case["inadmissible"] == [] for case in report["cases"])
    assert report["slices"]["workflow"]["access"]["n"] == 2
    assert report["slices"]["workflow"]["access"]["releasable_rate"] == 1.0
    assert report["release"]["index_version"] == "ix-2026-11-20"
    assert report["release"]["causes"] == {
        "cases": 5, "failing": 0, "first_failed_stage": {}, "inadmissible_rules": {}, "worst_cases": []
    }  # fmt: skip


def test_one_failing_workflow_blocks_even_when_the_aggregate_is_high(tmp_path, capsys):
    gold, traces, evidence = build(tmp_path, {"release-freeze": 20, "access": 1}, broken={"access-00"})
    config = tmp_path / "gates.yaml"
    config.write_text("gates:\n  releasable_rate: {min: 0.90}\nslice_gate: {min_rate: 0.95, min_n: 1}\n")
    code, out, _ = run(capsys, "score", "--gold", gold, "--trace", traces, "--evidence", evidence,
                       "--config", str(config))  # fmt: skip
    report = json.loads(out)
    assert report["layered"]["releasable_rate"] == round(20 / 21, 4)  # the aggregate passes its gate
    assert report["gates"][0]["pass"] is True
    assert code == 1 and report["release"]["decision"] == "block"
    (failed,) = report["release"]["failed_slices"]
    assert (failed["dimension"], failed["value"], failed["releasable_rate"]) == ("workflow", "access", 0.0)
    leak = next(case for case in report["cases"] if case["qid"] == "access-00")
    assert leak["first_failed_stage"] == "admissibility" and leak["inadmissible"] == ["restricted"]


def test_markdown_shows_stages_and_slices_worst_first(tmp_path, capsys):
    gold, traces, evidence = build(tmp_path, {"release-freeze": 2, "access": 1}, broken={"access-00"})
    code, out, _ = score(capsys, gold, traces, evidence, "--format", "markdown")
    assert code == 1 and "## Release decision: **block**" in out
    assert "- slice **workflow=access**: releasable 0.0% of 1" in out
    why = (
        "## Release decision: **block**\n\n"
        "**Why:** 1 of 3 cases fails first at admissibility (1 restricted).\n\n"
        "**Worst cases:**\n\n"
        "1. `access-00` (admissibility: restricted) — Question access-00?\n\n- "
    )
    assert why in out  # the cause first, then the failed gates and slices
    assert "| admissibility | 1 |" in out
    slices = out[out.index("## Slices") :]
    assert slices.index("workflow=access") < slices.index("workflow=release-freeze")
    assert "| access-00 | yes | yes | yes | yes | yes | OK | admissibility |" in out


def test_a_shipping_release_in_markdown_says_nothing_more(tmp_path, capsys):
    gold, traces, evidence = build(tmp_path, {"release-freeze": 2})
    code, out, _ = score(capsys, gold, traces, evidence, "--format", "markdown")
    assert code == 0 and "**Why:**" not in out and "Worst cases" not in out


def test_the_degraded_demo_is_blocked_first_at_admissibility_by_stale_and_restricted_chunks(tmp_path):
    root = tmp_path / "demo"
    init_demo(root, today=date(2026, 11, 22), traces_per_day=20)
    rebuild_index(root, degraded=True)
    traces = write_jsonl(tmp_path / "golden-traces.jsonl", replay_golden(root))
    out = tmp_path / "report.json"
    code = main(["score", "--gold", str(root / "golden" / "gold.jsonl"), "--trace", traces,
                 "--evidence", str(root / "evidence.jsonl"), "--config", str(root / "gates.yaml"),
                 "--format", "json", "--out", str(out)])  # fmt: skip
    report = json.loads(out.read_text())
    causes = report["release"]["causes"]
    assert code == 1 and report["release"]["decision"] == "block"
    assert causes["cases"] == report["n_cases"]
    assert causes["failing"] == sum(not case["releasable"] for case in report["cases"])
    stages = causes["first_failed_stage"]
    assert next(iter(stages)) == "admissibility" and max(stages.values()) == stages["admissibility"]
    assert stages == {s: n for s, n in report["first_failed_stage_histogram"].items() if s != "pass" and n}
    rules = causes["inadmissible_rules"]
    assert set(rules) == {"stale", "restricted"} and list(rules.values()) == sorted(rules.values())[::-1]
    assert sum(rules.values()) >= stages["admissibility"]
    assert cause_sentence(causes).startswith(
        f"{stages['admissibility']} of {causes['cases']} cases fail first at admissibility ("
    )
    worst = causes["worst_cases"]  # the worst case of each of the first three stages cases stop at
    assert [c["first_failed_stage"] for c in worst] == list(stages)[:3]
    assert set(worst[0]["rules"]) <= {"stale", "restricted"} and all(c["question"] for c in worst)


def test_golden_freeze_verify_and_score_refuses_a_changed_golden_set(tmp_path, capsys):
    gold, traces, evidence = build(tmp_path, {"access": 2})
    code, _, err = run(capsys, "golden", "verify", "--gold", gold)
    assert code == 2 and "no golden lock" in err
    code, out, _ = run(
        capsys, "golden", "freeze", "--gold", gold, "--version", "v1", "--approved-by", "alice"
    )
    assert code == 0 and json.loads(out)["n_cases"] == 2
    assert run(capsys, "golden", "verify", "--gold", gold)[0] == 0
    code, report, _ = score(capsys, gold, traces, evidence)
    assert report["release"]["golden_version"] == "v1" and len(report["release"]["golden_sha256"]) == 64

    Path(gold).write_text(Path(gold).read_text().replace("Question access-00?", "Edited question?"))
    code, _, err = run(capsys, "golden", "verify", "--gold", gold)
    assert code == 1 and "golden version v1" in err
    code, out, err = score(capsys, gold, traces, evidence)
    assert code == 2 and out == "" and "changed since golden version v1 was frozen" in err


def test_scoring_an_unfrozen_golden_set_warns(tmp_path, capsys):
    gold, traces, evidence = build(tmp_path, {"access": 1})
    code, report, err = score(capsys, gold, traces, evidence)
    assert code == 0 and "is not frozen" in err and report["release"]["golden_version"] is None


def test_baseline_promote_then_regress(tmp_path, capsys):
    gold, traces, evidence = build(tmp_path, {"release-freeze": 3, "access": 2})
    baseline = tmp_path / "baseline.json"
    code, _, err = score(capsys, gold, traces, evidence, "--baseline", str(baseline), "--promote")
    assert code == 0 and "promoted" in err
    saved = json.loads(baseline.read_text())["golden"]
    assert saved["metrics"]["releasable_rate"] == 1.0 and saved["n_cases"] == 5

    # A worse run: one leak. It is blocked by the regression and the baseline is not loosened.
    gold, traces, evidence = build(tmp_path, {"release-freeze": 3, "access": 2}, broken={"access-01"})
    before = baseline.read_bytes()
    code, report, err = score(capsys, gold, traces, evidence, "--baseline", str(baseline), "--promote",
                              "--config", str(_lenient(tmp_path)))  # fmt: skip
    assert code == 1 and report["release"]["decision"] == "block"
    regressions = {r["metric"]: r for r in report["release"]["regressions"]}
    assert (
        regressions["releasable_rate"]["baseline"] == 1.0 and regressions["releasable_rate"]["current"] == 0.8
    )
    assert "not promoting" in err and baseline.read_bytes() == before


def _lenient(tmp_path: Path) -> Path:
    config = tmp_path / "lenient.yaml"
    config.write_text("gates:\n  precision: {min: 0.0}\nslice_gate: {min_rate: 0.0}\n")
    return config


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("gates:\n  precison: {min: 0.8}\n", "unknown metric 'precison'"),
        ("gates:\n  precision: {min: high}\n", "gates.precision.min"),
        ("gates:\n  precision: {min: 0.8, max: 0.9}\n", "exactly one of min or max"),
        ("slice_gate: {min_rate: 2}\n", "slice_gate.min_rate"),
        ("k: [5\n", "malformed YAML"),
        ("colour: blue\n", "colour"),
    ],
)
def test_a_bad_config_is_unusable(tmp_path, capsys, config, message):
    gold, traces, _ = build(tmp_path, {"access": 1})
    path = tmp_path / "gates.yaml"
    path.write_text(config)
    code, out, err = run(capsys, "score", "--gold", gold, "--trace", traces, "--config", str(path))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_a_bad_baseline_file_is_unusable_and_untouched(tmp_path, capsys):
    gold, traces, evidence = build(tmp_path, {"access": 1})
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{not json")
    code, _, err = score(capsys, gold, traces, evidence, "--baseline", str(baseline), "--promote")
    assert code == 2 and "baseline.json" in err and baseline.read_text() == "{not json"


def test_layered_gates_need_evidence(tmp_path, capsys):
    gold, traces, _ = build(tmp_path, {"access": 1})
    code, _, err = run(capsys, "score", "--gold", gold, "--trace", traces, "--gates", "context_recall=0.9")
    assert code == 2 and "need --evidence" in err


def test_an_unreadable_registry_is_unusable(tmp_path, capsys):
    gold, traces, _ = build(tmp_path, {"access": 1})
    bad = write_jsonl(tmp_path / "evidence.jsonl", [{"chunk_id": "x", "version": "v1", "permitted": "yes",
                                                     "current": True, "text": "t"}])  # fmt: skip
    code, _, err = score(capsys, gold, traces, bad)
    assert code == 2 and "evidence.jsonl:1: id=x: field 'permitted'" in err


def test_the_shipped_layered_example_is_frozen_and_ships(capsys):
    example = Path(__file__).resolve().parents[2] / "examples" / "layered"
    gold = str(example / "gold.jsonl")
    assert run(capsys, "golden", "verify", "--gold", gold)[0] == 0
    inputs = ["--trace", str(example / "traces.jsonl"), "--evidence", str(example / "evidence.jsonl")]
    code, out, _ = run(capsys, "score", "--gold", gold, *inputs, "--config", str(example / "gates.yaml"))
    report = json.loads(out)
    assert code == 0 and report["release"]["decision"] == "ship"
    assert report["release"]["golden_version"] == "demo-2026.11.1"  # re-frozen when two cases became canaries
    assert set(report["slices"]["workflow"]) == {"access", "expenses", "incident", "release-freeze"}
