"""Text from data never becomes live HTML or Markdown in a report: slice names, case ids, index versions,
model names and errors in ``slice_report.md``, the CLI's Markdown and the judge's, rendered as text."""

from __future__ import annotations

import copy
import json
import re

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine_pipeline.cli import main
from ragspine_pipeline.reports.markdown import code_span, md_text, md_text_column
from ragspine_pipeline.reports.slice_report import slice_markdown
from tests.reports.test_slice_report import PRODUCTION, REPORT

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "a|b\nc",
    "[click](javascript:alert(1))",
    "**bold** `code` \\",
    "&lt;already&gt;",
]
TAG = re.compile(r"<\s*(script|img|iframe|svg|a)\b", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")


def live_html(markdown: str) -> list[str]:
    """HTML tags a renderer would make live: those outside code spans (code is shown literally)."""
    return TAG.findall(CODE_SPAN.sub("", markdown))


def cells(row: str) -> int:
    """The cells of a Markdown table row, as a renderer splits it (escaped pipes do not split)."""
    return len(re.split(r"(?<!\\)\|", row.strip().strip("|")))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from(list("<>&\"'|`*[]\\_\n\r\u2028 ab")), max_size=20), max_size=10)
)
def test_the_column_rule_is_the_text_rule(texts):
    assert md_text_column(pa.array(texts, pa.string())).to_pylist() == [md_text(t) for t in texts]


def test_hostile_texts_render_as_themselves():
    for text in HOSTILE:
        escaped = md_text(text)
        assert not live_html(escaped) and "\n" not in escaped and cells(f"| {escaped} |") == 1
    assert md_text("&lt;already&gt;") == "&amp;lt;already&amp;gt;"  # shown as typed, not as "<already>"
    assert code_span("a`b|c", cell=True) == "`` a`b\\|c ``"


def test_slice_report_escapes_slice_names_versions_and_judge_models():
    report = copy.deepcopy(REPORT)
    report["release"]["index_version"] = "ix`<script>alert(1)</script>"
    report["release"]["failed_slices"][0]["value"] = "<img src=x onerror=alert(1)>"
    report["slices"]["workflow"] = {
        name: {"n": 2, "releasable_rate": 0.5, "releasable_ci95": [0.1, 0.9]} for name in HOSTILE
    }
    judge = {
        "models": ["<img src=x onerror=alert(1)>"],
        "prompt_version": "v1",
        "failed": "<script>boom</script>",
        "metrics": {},
    }
    text = slice_markdown(report, production=PRODUCTION, judge=judge)
    assert not live_html(text), text
    table = [line for line in text.splitlines() if line.startswith("| workflow=") and "0.100–0.900" in line]
    assert len(table) == len(HOSTILE) and all(cells(row) == cells(table[0]) for row in table)
    assert "&lt;img src=x onerror=alert(1)&gt;" in text


def test_cli_markdown_escapes_slice_values_and_case_ids(tmp_path, capsys):
    gold = tmp_path / "gold.jsonl"
    traces = tmp_path / "traces.jsonl"
    evidence = tmp_path / "evidence.jsonl"
    rows = [
        {
            "case_id": f"<script>c{i}</script>",
            "question": "q",
            "answerable": True,
            "required_source_ids": ["d1"],
            "tags": {"workflow": value},
        }
        for i, value in enumerate(HOSTILE)
    ]
    gold.write_text("".join(json.dumps(r) + "\n" for r in rows))
    traces.write_text(
        "".join(
            json.dumps(
                {
                    "case_id": r["case_id"],
                    "first_stage_ids": ["d1"],
                    "selected_context_ids": ["d1"],
                    "selected_versions": ["v1"],
                    "versions": {"index": "<img src=x onerror=alert(1)>", "retriever": "r"},
                    "answer": {"claim": "the answer", "citations": ["d1"]},
                }
            )
            + "\n"
            for r in rows
        )
    )
    chunk = {"chunk_id": "d1", "version": "v1", "permitted": True, "current": True, "text": "the answer"}
    evidence.write_text(json.dumps(chunk) + "\n")
    args = ["score", "--gold", str(gold), "--trace", str(traces), "--evidence", str(evidence)]
    main([*args, "--format", "markdown"])
    out = capsys.readouterr().out
    assert not live_html(out), out
    assert "&lt;img src=x onerror=alert(1)&gt;" in out  # the index version, as text
    slice_rows = [line for line in out.splitlines() if line.startswith("| workflow=")]
    assert len(slice_rows) == len(HOSTILE) and len({cells(row) for row in slice_rows}) == 1


def test_dagster_metadata_tables_escape_their_cells():
    from ragspine_pipeline.defs.metadata import markdown_table

    table = markdown_table(["slice", "n"], [(value, 1) for value in HOSTILE])
    assert not live_html(table)
    assert all(cells(row) == 2 for row in table.splitlines())
