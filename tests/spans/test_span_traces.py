"""Traces read straight from OpenTelemetry / OpenInference spans: what a team's instrumented service
writes (the SDK, the OpenAI client's OpenInference instrumentor, a Collector's OTLP/JSON or Phoenix's
span table) is checked, scored against a golden set joined on the question, and sampled for the night
without an export script."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.contracts.columns import load_traces
from ragspine_pipeline.contracts.spans import SpanSettings, span_format, span_traces
from ragspine_pipeline.sources.sampling import sample_day
from ragspine_pipeline.sources.span_store import open_store
from tests.spans.traced_app import CollectorFileExporter, PhoenixSpanTable, StandInLLM, TracedRagApp

CORPUS = {
    "leave#1": "Employees get 25 days of annual leave a year.",
    "leave#2": "Unused leave of up to 5 days carries over to the next year.",
    "travel#1": "Economy class is booked for flights shorter than six hours.",
    "travel#2": "Hotel costs are refunded up to 150 euros a night.",
    "security#1": "Laptops lock after five minutes without input.",
    "security#2": "Passwords are changed every ninety days.",
}
CASES = [
    ("How many days of annual leave do employees get?", "Employees get 25 days a year", "leave#1"),
    ("How many unused leave days carry over?", "Up to 5 days carry over", "leave#2"),
    ("Which class is booked for short flights?", "Economy class is booked", "travel#1"),
    ("How much of a hotel night is refunded?", "Up to 150 euros a night", "travel#2"),
    ("When do laptops lock?", "after five minutes without input", "security#1"),
    ("How often are passwords changed?", "every ninety days", "security#2"),
]
FAILING = "Who approves overtime?"  # the stand-in LLM answers it with a 500
CITATIONS = r"\[([\w-]+#\d+)\]"
TOPICS = {"leave": "hr", "travel": "finance", "security": "it"}


def _answers(good: bool):
    def answer(question: str) -> str:
        for asked, fact, doc in CASES:
            if asked == question:
                return f"{fact} [{doc}]." if good else f"{fact.split()[0]} is not covered [{CASES[0][2]}]."
        return "not in context"

    return answer


def _gold(path: Path) -> Path:
    lines = [
        {
            "qid": f"case-{i}",
            "question": question,
            "answerable": True,
            "gold_claim_substr": [fact],
            "gold_citations": [doc],
        }
        for i, (question, fact, doc) in enumerate(CASES)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _run_app(folder: Path, *, good: bool = True, rerank: bool = False, partitioned: bool = False) -> dict:
    """The golden questions (and one that fails) asked of the traced app; what its exporters wrote."""
    table = PhoenixSpanTable()
    hours = iter(datetime(2026, 11, 28, h, 5, tzinfo=UTC) for h in range(0, 24))
    collector = (
        CollectorFileExporter(partitioned_root=folder / "collector", clock=lambda: next(hours), seed=1)
        if partitioned
        else CollectorFileExporter(folder / "spans.json")
    )
    results = []
    with (
        StandInLLM(_answers(good), fail=[FAILING]) as llm,
        TracedRagApp(
            CORPUS, llm.base_url, service_version="idx-7", exporters=[collector, table], rerank=rerank
        ) as app,
    ):
        for i, (question, _fact, doc) in enumerate([*CASES, (FAILING, "", "")]):
            topic = doc.split("#")[0] if doc else "hr"
            results.append(
                app.ask(
                    question,
                    session_id=f"s-{i % 2}",
                    user_id="u-1",
                    metadata={"topic": TOPICS.get(topic, topic)},
                )
            )
        app.flush()
    return {"collector": collector, "table": table, "results": results}


def _log_day(run: dict, store: Path) -> None:
    """The answered requests of ``run`` as the app would have logged them in the project's dialect (its
    citations found in the answer as the pattern finds them), one day under ``store``."""
    day = store / "dt=2026-11-28"
    day.mkdir(parents=True)
    lines = [
        json.dumps({**r.project_line(), "citations": re.findall(CITATIONS, r.answer)})
        for r in run["results"]
        if r.error is None
    ]
    (day / "part-0.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traced")
    run = _run_app(folder)
    run["table"].write_jsonl(folder / "spans-table.jsonl")
    run["table"].write_parquet(folder / "spans-table.parquet")
    return folder, run


def test_check_traces_lists_what_the_spans_carry_and_the_metrics_they_enable(traced, tmp_path, capsys):
    folder, _run = traced
    gold = _gold(tmp_path / "gold.jsonl")
    code = main(
        ["check-traces", str(folder / "spans.json"), "--gold", str(gold), "--citation-pattern", CITATIONS]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.splitlines()[0].endswith("6 trace(s), grouped from OpenTelemetry spans (OTLP/JSON)")
    carried = {
        line.split()[0]: int(line.split()[1])
        for line in out.splitlines()[1:]
        if line.startswith("  ") and line.split()[1].isdigit()
    }
    for field in (
        "question",
        "claim",
        "citations",
        "retrieved_ids",
        "context_texts",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "tags",
        "index_version",
    ):
        assert carried[field] >= 6, field
    measured = out.split("metrics measured:")[1].split("not applicable")[0]
    for metric in ("precision", "chr", "recall@k", "compliance"):
        assert f"  {metric} = " in measured


def test_a_golden_set_joined_on_the_question_decides_ship_and_block(traced, tmp_path, capsys):
    folder, _run = traced
    gold = _gold(tmp_path / "gold.jsonl")
    args = ["score", "--gold", str(gold), "--citation-pattern", CITATIONS, "--format", "json"]
    assert main([*args, "--trace", str(folder / "spans.json")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["missing"] == 0 and report["precision"] == 1.0 and report["recall@k"] == 1.0

    broken = _run_app(tmp_path, good=False)
    assert broken["results"][0].answer.endswith("is not covered [leave#1].")
    assert main([*args, "--trace", str(tmp_path / "spans.json")]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["missing"] == 0 and report["precision"] < 0.5


def test_the_three_forms_give_the_traces_the_app_logged(traced):
    folder, run = traced
    settings = SpanSettings(citation_pattern=CITATIONS)
    expected = {r.trace_id: r.project_line() for r in run["results"] if r.error is None}
    for name, form in [
        ("spans.json", "otlp"),
        ("spans-table.jsonl", "span_table"),
        ("spans-table.parquet", "span_table"),
    ]:
        assert span_format(folder / name) == form
        read = span_traces([folder / name], settings, request_ids=True)
        got = {}
        for line in read.lines:
            trace = {k: v for k, v in json.loads(line).items() if v is not None}
            got[trace["request_id"]] = trace
        assert set(got) == set(expected), name
        for trace_id, logged in expected.items():
            trace = got[trace_id]
            for key in ("question", "answer", "retrieved_ids", "contexts", "token_usage", "tags", "ok", "ts"):
                assert trace[key] == logged[key], (name, key)
            assert trace["latency_ms"] == pytest.approx(logged["latency_ms"], abs=1e-3)
            assert trace["citations"] == re.findall(CITATIONS, logged["answer"]) != []
            # The span table has no resource attributes: service.version comes only with OTLP.
            assert trace.get("versions") == (logged["versions"] if form == "otlp" else None), name
        # The request whose LLM call failed has no answer: one unusable trace, named with why.
        failed = next(r for r in run["results"] if r.error is not None)
        assert [trace_id for trace_id, _why in read.unusable] == [failed.trace_id]
        assert "no answer" in read.unusable[0][1] and "failed" in read.unusable[0][1]


def test_a_reranker_gives_reranked_ids_and_a_case_id_attribute_joins_by_id(tmp_path):
    run = _run_app(tmp_path, rerank=True)
    read = span_traces([tmp_path / "spans.json"], SpanSettings(case_id_attribute="metadata.topic"))
    traces = [json.loads(line) for line in read.lines]
    by_question = {r.question: r for r in run["results"]}
    for trace in traces:
        asked = by_question[trace["question"]]
        assert trace["reranked_ids"] == asked.reranked_ids != asked.retrieved_ids
        assert trace["qid"] == asked.metadata["topic"]


def test_a_day_of_collector_partitions_gives_the_nightly_summary_of_the_same_traces_logged(tmp_path, capsys):
    run = _run_app(tmp_path, partitioned=True)
    files = run["collector"].files
    assert files and all("year=2026/month=11/day=28/hour=" in f.as_posix() for f in files)
    # The same requests as the app logged them, in the project's own dialect.
    _log_day(run, tmp_path / "logged")

    def backfill(store: Path, reports: Path, *more: str) -> dict:
        args = ["production", "backfill", "--days", "1", "--until", "2026-11-28", "--store", str(store)]
        assert main([*args, "--reports", str(reports), "--sample-size", "5", *more]) == 0
        return json.loads((reports / "production" / "2026-11-28.json").read_text())

    own = backfill(tmp_path / "logged", tmp_path / "own")
    spans = backfill(
        tmp_path / "collector", tmp_path / "spans", "--format", "otlp", "--citation-pattern", CITATIONS
    )
    out = capsys.readouterr().out
    assert "2026-11-28: 5 sampled" in out
    assert spans == own


def test_sampling_a_day_quarantines_a_trace_without_its_root_and_a_file_that_is_not_spans(tmp_path):
    run = _run_app(tmp_path, partitioned=True)
    first = run["collector"].files[0]
    # The root spans end last: drop every line of one trace's root export, as a lost batch would.
    roots = [f for f in run["collector"].files if '"parentSpanId"' not in f.read_text()]
    lost = roots[0]
    lost_trace = json.loads(lost.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    lost.unlink()
    (first.parent / "garbage.json").write_text("{not json\n")
    store = open_store(str(tmp_path / "collector"), spans=SpanSettings())
    assert store.days() == ["2026-11-28"]
    quarantine = tmp_path / "quarantine.jsonl"
    sample = sample_day(store, "2026-11-28", n=50, seed=7, quarantine=quarantine)
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    errors = {e["field"]: e["error"] for e in entries}
    assert f"trace_id {lost_trace}: no root span" in errors["trace_id"]
    assert "garbage.json" in errors["file"]
    assert sample.counts["quarantined"]["invalid_trace"] == 3  # the lost root, the failed answer, the file
    assert sample.counts["valid"] == len(CASES) - 1


def test_gzip_and_one_request_per_file_are_read_and_a_broken_file_is_one_line(traced, tmp_path, capsys):
    folder, _run = traced
    text = (folder / "spans.json").read_text()
    # One gzip member a line, as the Collector's file exporter appends them.
    members = [gzip.compress(line.encode() + b"\n") for line in text.splitlines()]
    (tmp_path / "spans.json.gz").write_bytes(b"".join(members))
    whole = json.loads(text.splitlines()[0])
    for line in text.splitlines()[1:]:
        whole["resourceSpans"] += json.loads(line)["resourceSpans"]
    (tmp_path / "request.json").write_text(json.dumps(whole, indent=2))
    base = load_traces(folder / "spans.json").table
    for name in ("spans.json.gz", "request.json"):
        assert load_traces(tmp_path / name).table.equals(base), name

    (tmp_path / "broken.json").write_text(
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 5}]}]}]}\n{"resourceSpans": \n'
    )
    assert main(["check-traces", str(tmp_path / "broken.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "broken.json" in err and "OTLP/JSON" in err


def test_the_collector_partitions_under_an_s3_prefix_sample_as_the_local_folder(
    tmp_path, bucket, s3_endpoint
):
    name, client = bucket
    run = _run_app(tmp_path, partitioned=True)
    root = tmp_path / "collector"
    for path in run["collector"].files:
        client.upload_file(str(path), name, f"otel/{path.relative_to(root).as_posix()}")
    # A day kept in a dt= folder beside the Collector's partitions (the spans of the day before).
    earlier = root / "dt=2026-11-27" / "spans.json"
    earlier.parent.mkdir()
    earlier.write_bytes(run["collector"].files[0].read_bytes())
    client.upload_file(str(earlier), name, "otel/dt=2026-11-27/spans.json")
    settings = SpanSettings(citation_pattern=CITATIONS)
    local = open_store(str(root), spans=settings)
    remote = open_store(f"s3://{name}/otel", spans=settings, endpoint_url=s3_endpoint)
    assert remote.days() == local.days() == ["2026-11-27", "2026-11-28"]
    assert remote.objects("2026-11-27") == local.objects("2026-11-27") == ["2026-11-27.spans"]
    assert local.objects("2026-11-26") == []
    a = sample_day(local, "2026-11-28", n=4, seed=3, quarantine=None)
    b = sample_day(remote, "2026-11-28", n=4, seed=3, quarantine=None)
    assert a.records == b.records and len(a.records) == 4
    assert a.counts == b.counts


def test_the_citation_patterns_the_docs_show_find_the_ids_they_say():
    from ragspine_pipeline import duck
    from ragspine_pipeline.contracts.span_grouping import _citations

    page = (Path(__file__).resolve().parents[2] / "docs" / "your-service.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(.+?)` \| `'(.+?)'` \|$", page, flags=re.M)
    assert len(rows) == 3
    for answer, pattern in rows:
        sql = f"SELECT {_citations(SpanSettings(citation_pattern=pattern))} AS c FROM t"
        found = duck.column(sql, t=pa.table({"answer": [answer.replace("…", "It says")]})).to_pylist()
        assert found == [["leave-policy#1"]], (answer, pattern)


def test_a_citation_attribute_is_read_as_a_list_a_json_array_or_ids_separated_by_commas():
    from ragspine_pipeline import duck
    from ragspine_pipeline.contracts.span_grouping import _citations

    values = [
        '{"values": [{"stringValue": "a#1"}, {"stringValue": "b#2"}]}',  # OTLP's arrayValue
        '["a#1", "b#2"]',
        "a#1, b#2",
        None,
    ]
    sql = f"SELECT {_citations(SpanSettings(citation_attribute='rag.citations'))} AS c FROM t"
    found = duck.column(sql, t=pa.table({"citation_value": pa.array(values, pa.string())})).to_pylist()
    assert found == [["a#1", "b#2"]] * 3 + [None]


def _nightly_summary(root: Path, trace_store, day: str) -> dict:
    """The summary the nightly asset of a service declared with ``trace_store`` writes for ``day``."""
    import dagster as dg

    from ragspine_pipeline.component import RagEvaluation, definitions_of
    from ragspine_pipeline.definitions import location
    from ragspine_pipeline.defs.local import backfill_production

    declaration = RagEvaluation.resolve_from_dict(
        {
            "name": "bot",
            "prefixed": False,
            "golden_set": "gold.jsonl",
            "sut": {"kind": "http", "url": "http://127.0.0.1:9/answer"},
            "trace_store": trace_store,
            "sample_size": 5,
        }
    )
    defs = location(definitions_of(declaration.service(root / "defs" / "bot", root)))
    with dg.instance_for_test() as instance:
        (run,) = backfill_production(defs, instance, [day])
        assert run.success
    return json.loads((root / "var" / "bot" / "reports" / "production" / f"{day}.json").read_text())


def test_the_nightly_asset_over_collector_partitions_writes_the_summary_of_the_same_traces_logged(tmp_path):
    run = _run_app(tmp_path / "spans", partitioned=True)
    _log_day(run, tmp_path / "logged" / "traces")
    own = _nightly_summary(tmp_path / "logged", "traces", "2026-11-28")
    store = {"path": "collector", "format": "otlp", "citation_pattern": CITATIONS}
    spans = _nightly_summary(tmp_path / "spans", store, "2026-11-28")
    assert spans == own and spans["n"] == 5


def test_a_golden_replay_recorded_as_spans_answers_each_case_by_its_question(traced, tmp_path, capsys):
    folder, _run = traced
    gold = _gold(tmp_path / "gold.jsonl")
    sut = tmp_path / "sut.yaml"
    sut.write_text(f"kind: recorded\npath: {folder / 'spans.json'}\ncitation_pattern: '{CITATIONS}'\n")
    replayed = tmp_path / "replayed.jsonl"
    assert main(["replay", "--gold", str(gold), "--sut", str(sut), "--out", str(replayed)]) == 0
    traces = [json.loads(line) for line in replayed.read_text().splitlines()]
    assert sorted(t["qid"] for t in traces) == [f"case-{i}" for i in range(len(CASES))]
    assert all(t["citations"] for t in traces)
    capsys.readouterr()
    assert main(["score", "--gold", str(gold), "--trace", str(replayed), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"] == 1.0


def test_a_citation_pattern_duckdb_cannot_run_is_a_usage_error_of_one_line(traced, capsys):
    folder, _run = traced
    for pattern in (r"(?<=\[)[\w-]+#\d+", "(a)(b)", "(unclosed"):
        assert main(["check-traces", str(folder / "spans.json"), "--citation-pattern", pattern]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "citation pattern" in err, err


def test_a_fifo_named_like_a_span_file_in_a_day_is_not_read(tmp_path):
    import os

    run = _run_app(tmp_path, partitioned=True)
    os.mkfifo(run["collector"].files[0].parent / "stuck.json")
    store = open_store(str(tmp_path / "collector"), spans=SpanSettings())
    sample = sample_day(store, "2026-11-28", n=50, seed=7, quarantine=None)
    assert sample.counts["valid"] == len(CASES)
