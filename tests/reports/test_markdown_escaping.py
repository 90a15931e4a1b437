"""Text from data never becomes live HTML or Markdown in a report: slice names, case ids, index versions,
model names and errors in ``slice_report.md``, the CLI's Markdown and the judge's, rendered as text."""

from __future__ import annotations

import copy
import json
import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine_pipeline.cli import main
from ragspine_pipeline.reports.columns import json_escaped, write_column
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


# Mostly plain text, so that whole columns without a character to escape come up too (they skip the
# work); U+2027 and "é" share no character with a line break but lead with bytes that might.
TEXT = st.text(
    alphabet=st.sampled_from(list("<>&\"'|`*[]\\_\n\r\u2028\u2029\u2027é\t ab") + ["a", "b"] * 10),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, max_size=10), st.integers(0, 3))
def test_the_column_rule_is_the_text_rule(texts, start):
    column = pa.array(["`x`", *texts], pa.string()).slice(1)  # a sliced column: its bytes start later
    assert md_text_column(column).to_pylist() == [md_text(t) for t in texts]
    assert md_text_column(column.slice(start)).to_pylist() == [md_text(t) for t in texts[start:]]


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, max_size=10), st.integers(0, 3))
def test_json_escaped_values_read_back_as_themselves(texts, start):
    column = pa.array(['"', *texts], pa.string()).slice(1 + min(start, len(texts)))
    escaped = json_escaped(column).to_pylist()
    assert [json.loads(f'"{value}"') for value in escaped] == texts[start:]


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


@pytest.mark.parametrize("char", list("<>&\"'|`*[]\\\n\r\u2028\u2029"))
def test_one_character_to_escape_anywhere_in_a_sliced_column_is_escaped(char):
    """A column skips the escaping only when no value holds such a character; here the only one is in
    the last value of a slice (the bytes before the slice hold none)."""
    column = pa.array(["plain", "text", f"a{char}b"], pa.string()).slice(1)
    assert md_text_column(column).to_pylist() == ["text", md_text(f"a{char}b")]
    assert md_text(f"a{char}b") != f"a{char}b"


@pytest.mark.parametrize("char", ['"', "\\", "\x00", "\n", "\x1f"])
def test_one_character_to_escape_in_json_anywhere_in_a_sliced_column_is_escaped(char):
    column = pa.array(["plain", "text", f"a{char}b"], pa.string()).slice(1)
    assert [json.loads(f'"{value}"') for value in json_escaped(column).to_pylist()] == ["text", f"a{char}b"]


def test_written_columns_are_the_values_of_the_slice(tmp_path):
    with open(tmp_path / "out.txt", "w", encoding="utf-8") as out:
        write_column(out, pa.array(["skipped ", "first ", "é second"], pa.string()).slice(1), skip=2)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "rst é second"
