"""The HTML report of a run whose narrative traces carry no context: the QA table says
``narrative_faithfulness`` was not measured and which field the traces lack, never "applies to no case";
a gate on it is listed among the failures with that reason."""

from __future__ import annotations

import html
import json

from ragspine_pipeline.cli import main
from ragspine_pipeline.reports.html import render_html
from tests.cli.test_narrative_unmeasured import NEEDS, WARNING, files


def report(tmp_path, capsys, *extra: str, **kw) -> dict:
    gold, traces = files(tmp_path, **kw)
    main(["score", "--gold", gold, "--trace", traces, "--format", "json", *extra])
    return json.loads(capsys.readouterr().out)


def test_the_qa_table_says_not_measured_and_the_failure_says_why(tmp_path, capsys):
    page = html.unescape(render_html(report(tmp_path, capsys, "--gates", "faithfulness=0.9")))
    assert f"n/a — 4 not measured: their traces lack {NEEDS}" in page
    assert f"was not measured ({WARNING.format(n=4)}), needs ≥" in page


def test_a_partly_measured_gate_shows_its_rate_and_what_it_left_out(tmp_path, capsys):
    page = html.unescape(render_html(report(tmp_path, capsys, with_context=(1, 3))))
    assert f"100.0% — 2 not measured: their traces lack {NEEDS}" in page
