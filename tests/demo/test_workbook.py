"""The demo workbook: healthy facts pass their own baseline, degraded facts fail on colours and headers."""

from __future__ import annotations

import json
from pathlib import Path

from ragspine_pipeline.cli import main
from ragspine_pipeline.contracts.extraction import load_facts, load_truth
from ragspine_pipeline.decision.extraction_baseline import compare, load_thresholds
from ragspine_pipeline.demo.workbook import write_extraction_demo
from ragspine_pipeline.scoring.extraction import score_extraction


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def evaluate(paths: dict[str, Path]):
    facts = load_facts(paths["facts"])
    score = score_extraction(facts.cells, load_truth(paths["truth"]))
    return facts, score, compare(load_thresholds(paths["baseline"]), score.accuracies())


def test_healthy_facts_pass_their_baseline(tmp_path):
    paths = write_extraction_demo(tmp_path)
    assert paths == {
        "truth": tmp_path / "extraction" / "truth.json",
        "facts": tmp_path / "extraction" / "facts.jsonl",
        "baseline": tmp_path / "extraction" / "baseline.json",
    }
    truth = load_truth(paths["truth"])
    assert 120 <= len(truth) <= 200
    assert {cell.sheet for cell in truth.values()} == {"Summary", "Revenue by region", "Headcount"}
    facts, score, check = evaluate(paths)
    assert check.passed and check.unmeasured == []
    assert len(facts.invalid) == 2 and facts.duplicates == 1
    assert (score.facts_only, score.truth_only) == (1, 1)
    accuracies = score.accuracies()
    assert 0.99 <= accuracies["cell_value"] < 1.0
    assert accuracies["color_mapping"] >= 0.97
    assert accuracies["header_attribution"] == 1.0
    assert load_thresholds(paths["baseline"]) == accuracies  # the baseline is the healthy run


def test_degraded_facts_fail_on_colours_and_headers_only(tmp_path, capsys):
    healthy = evaluate(write_extraction_demo(tmp_path))[1].accuracies()
    paths = write_extraction_demo(tmp_path, degraded=True)
    _, score, check = evaluate(paths)
    assert sorted(f.channel for f in check.failed) == ["color_mapping", "header_attribution"]
    degraded = score.accuracies()
    assert degraded["cell_value"] == healthy["cell_value"]
    # Every aligned cell counts in every channel, most with no fill and no span on either side: the
    # lost fills and spans are a smaller share of the total than of the cells that have one.
    assert degraded["color_mapping"] < healthy["color_mapping"] - 0.1
    assert degraded["header_attribution"] < healthy["header_attribution"]

    args = ["extraction", "--facts", str(paths["facts"]), "--truth", str(paths["truth"])]
    assert main([*args, "--baseline", str(paths["baseline"])]) == 1
    assert json.loads(capsys.readouterr().out)["pass"] is False


def test_degraded_first_still_writes_the_healthy_baseline(tmp_path):
    paths = write_extraction_demo(tmp_path, degraded=True)
    assert not evaluate(paths)[2].passed
    assert write_extraction_demo(tmp_path)["baseline"] == paths["baseline"]
    assert evaluate(paths)[2].passed


def test_writing_twice_changes_nothing_and_the_baseline_is_never_overwritten(tmp_path):
    write_extraction_demo(tmp_path)
    before = snapshot(tmp_path)
    write_extraction_demo(tmp_path)
    assert snapshot(tmp_path) == before
    baseline = tmp_path / "extraction" / "baseline.json"
    baseline.write_text('{"cell_value": 0.5}\n', encoding="utf-8")
    write_extraction_demo(tmp_path, degraded=True)
    assert baseline.read_text("utf-8") == '{"cell_value": 0.5}\n'


def test_the_content_is_deterministic(tmp_path):
    first = write_extraction_demo(tmp_path / "a")
    second = write_extraction_demo(tmp_path / "b")
    for name in ("truth", "facts", "baseline"):
        assert first[name].read_bytes() == second[name].read_bytes()
