"""A small RAGSpine golden set and traces its engine could have written, for the CLI tests of RAGSpine's
report formats and of baselines set by hand."""

from __future__ import annotations

import json
from pathlib import Path

TAGS = {"topic": "FIN", "scope": "ACME_HK", "qtype": "phrasing"}
SOURCE = {"doc": "ACME_FY2025_Results.pptx", "locator": "slide=5,table=1,row=2,col=3"}


def numeric_case(qid: str, value: float, **tags: str) -> dict:
    expected = {"clarification": "none", "refuse": False, "value": value, "unit": "USD_M", "source": SOURCE}
    return {
        "id": qid,
        "question": f"What is the revenue of {qid}?",
        "case_type": "numeric",
        "expected": expected,
        "tags": {**TAGS, **tags},
        "reference_date": "2026-06-12",
    }


def refusal_case(qid: str, **tags: str) -> dict:
    return {
        "id": qid,
        "question": f"What is the ROE of {qid} in 2030?",
        "case_type": "refusal",
        "expected": {"clarification": "none", "refuse": True},
        "tags": {**TAGS, **tags},
        "reference_date": "2026-06-12",
    }


def found(qid: str, value: float | None, unit: str = "USD_M") -> dict:
    """A trace of an answered numeric case citing :data:`SOURCE` (``value`` None: nothing found)."""
    outcome = {"clarification_mode": "none", "refused": value is None, "sources": [SOURCE]}
    if value is not None:
        outcome.update(found_value=value, found_unit=unit, found_source=SOURCE)
    claim = f"ACME_HK FY2025 REVENUE 为 {value} {unit}（来源：{SOURCE['doc']} · {SOURCE['locator']}）"
    return {"id": qid, "answer": {"claim": claim, "citations": []}, "outcome": outcome}


def refused(qid: str, text: str = "查不到：2030 年的数据不在事实表中。") -> dict:
    outcome = {"clarification_mode": "none", "refused": True}
    return {"id": qid, "answer": {"claim": text, "citations": []}, "outcome": outcome}


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def golden_set(tmp_path: Path) -> str:
    """Three numeric cases and a refusal case."""
    gold = [numeric_case("num-1", 1702.0), numeric_case("num-2", 818.0), numeric_case("num-3", 14.8)]
    return write_jsonl(tmp_path / "gold.jsonl", [*gold, refusal_case("ref-1")])


def traces(tmp_path: Path, right: int, name: str = "traces.jsonl") -> str:
    """Traces where the first ``right`` numeric cases are answered right, the others with a wrong unit."""
    values = [1702.0, 818.0, 14.8]
    rows = [found(f"num-{i + 1}", v, "USD_M" if i < right else "USD_B") for i, v in enumerate(values)]
    return write_jsonl(tmp_path / name, [*rows, refused("ref-1")])
