"""Production metrics: the vectorised ``production_metrics`` against a per-trace oracle.

The oracle below loops over traces (and slices) on purpose and is written from the definitions in
``ragspine_pipeline.scoring.production``'s docstring. Admissibility and claim support reuse the layered
oracle (``tests/scoring/layered_oracle.py``), itself written per case from the layered definitions.
"""

from __future__ import annotations

import dataclasses
import json
import math
import unicodedata
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragspine_pipeline.contracts.columns import EVIDENCE_SCHEMA, load_gold, load_traces
from ragspine_pipeline.scoring import production
from ragspine_pipeline.scoring.grounded import score_grounded
from ragspine_pipeline.scoring.layered import score_layered
from ragspine_pipeline.scoring.production import fabricated_numbers, production_metrics
from ragspine_pipeline.scoring.production_results import ProductionMetrics
from tests.scoring import layered_oracle, peer_rules
from tests.scoring.conftest import gold_table, trace_table

# -- the oracle ------------------------------------------------------------------------------------

Z = 1.959963984540054
RULES = tuple(rule for rule in layered_oracle.RULES if rule != "missing_trace")
PERIOD_RE, DIGIT_RE = peer_rules.RAGSPINE_PERIOD_RE, peer_rules.DIGIT_RE


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int) -> dict:
    low, high = wilson(k, n)
    return {"value": k / n if n else None, "n": n, "low": low, "high": high, "effective_n": None}


def clustered_effective_n(answers: list[tuple[int, int]]) -> float:
    """The independent observations ``(supported, claims)`` per answer are worth, one answer at a time:
    R(1 − R) over the cluster-robust variance of R = Σs / Σm, at most Σm; the number of answers with
    claims when that variance is 0."""
    answers = [(s, m) for s, m in answers if m > 0]
    total = sum(m for _, m in answers)
    if not answers:
        return 0.0
    ratio = sum(s for s, _ in answers) / total
    a = len(answers)
    variance = a / (a - 1) * sum((s - ratio * m) ** 2 for s, m in answers) / total**2 if a > 1 else 0.0
    if variance <= 1e-15:
        return float(a)
    return min(ratio * (1 - ratio) / variance, float(total))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    h = (len(ordered) - 1) * q
    below = math.floor(h)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (h - below) * (ordered[above] - ordered[below])


def is_refusal(trace: dict) -> bool:
    return layered_oracle.is_refusal(trace.get("claim"), trace.get("outcome_refused"))


def has_fabricated_number(text: str | None) -> bool:
    if text is None:
        return False
    return DIGIT_RE.search(PERIOD_RE.sub("", unicodedata.normalize("NFKC", text))) is not None


def oracle_metrics(
    traces: list[dict], registry: dict | None, required_versions=layered_oracle.DEFAULT_REQUIRED_VERSIONS
) -> dict:
    """Every metric of the traces, one trace at a time."""
    n = refused = compliant = shipped = valid = fabricated = admissible = claims = supported = 0
    per_answer = []
    latencies, prompts, completions, with_tokens = [], [], [], 0
    for trace in traces:
        refusal = is_refusal(trace)
        citations = trace.get("citations")
        retrieved = trace.get("retrieved_ids") or []
        n += 1
        refused += refusal
        compliant += citations is not None or refusal
        if refusal:
            fabricated += has_fabricated_number(trace.get("claim"))
        else:
            shipped += 1
            valid += bool(citations) and all(cited in retrieved for cited in citations)
        if registry is not None:
            admissible += not layered_oracle.admissibility(trace, registry, required_versions)
            if not refusal:
                selected = trace.get("selected_context_ids")
                selected = trace.get("retrieved_ids") if selected is None else selected
                answer = [0, 0]
                for claim in layered_oracle.claims_of(trace):
                    claims += 1
                    support = any(layered_oracle.supports(claim, chunk, registry) for chunk in selected or [])
                    supported += support
                    answer[0] += support
                    answer[1] += 1
                per_answer.append(tuple(answer))
        if trace.get("latency_ms") is not None:
            latencies.append(trace["latency_ms"])
        if trace.get("prompt_tokens") is not None:
            prompts.append(trace["prompt_tokens"])
        if trace.get("completion_tokens") is not None:
            completions.append(trace["completion_tokens"])
        with_tokens += trace.get("prompt_tokens") is not None or trace.get("completion_tokens") is not None

    metrics = {
        "refusal_rate": rate(refused, n),
        "production_compliance": rate(compliant, n),
        "retrieved_citation_rate": rate(valid, shipped),
    }
    if registry is not None:
        metrics["production_admissible_rate"] = rate(admissible, n)
    low, high = wilson(fabricated, refused)
    metrics["production_fabrication"] = {
        "value": fabricated,
        "n": refused,
        "rate": fabricated / refused if refused else None,
        "low": low,
        "high": high,
    }
    if registry is not None:
        metrics["lexical_faithfulness"] = {
            **rate(supported, claims),
            "effective_n": clustered_effective_n(per_answer),
        }
    metrics["latency_p50_ms"] = {"value": percentile(latencies, 0.5), "n": len(latencies)}
    metrics["latency_p95_ms"] = {"value": percentile(latencies, 0.95), "n": len(latencies)}
    metrics["prompt_tokens_mean"] = {
        "value": sum(prompts) / len(prompts) if prompts else None,
        "n": len(prompts),
    }
    metrics["completion_tokens_mean"] = {
        "value": sum(completions) / len(completions) if completions else None,
        "n": len(completions),
    }
    metrics["tokens_total"] = {"value": sum(prompts) + sum(completions), "n": with_tokens}
    return {"n": n, "metrics": metrics}


def oracle(traces: list[dict], evidence: list[dict] | None, dimensions=None) -> dict:
    registry = None if evidence is None else {chunk["chunk_id"]: chunk for chunk in evidence}
    result = oracle_metrics(traces, registry)
    failures = {}
    if registry is not None:
        failures = {rule: 0 for rule in RULES}
        for trace in traces:
            for rule in layered_oracle.admissibility(
                trace, registry, layered_oracle.DEFAULT_REQUIRED_VERSIONS
            ):
                failures[rule] += 1
    members: dict[str, dict[str, list[dict]]] = {dimension: {} for dimension in dimensions or ()}
    for trace in traces:
        for dimension, value in dict(trace.get("tags") or []).items():
            if dimensions is None or dimension in dimensions:
                members.setdefault(dimension, {}).setdefault(value, []).append(trace)
    slices = {
        dimension: {value: oracle_metrics(group, registry) for value, group in values.items()}
        for dimension, values in members.items()
    }
    return {**result, "admissibility_failures": failures, "slices": slices}


def unrounded(result: ProductionMetrics) -> dict:
    """The result as plain dicts, unrounded, in the oracle's shape."""

    def metrics(values: dict) -> dict:
        return {name: dataclasses.asdict(metric) for name, metric in values.items()}

    return {
        "n": result.n,
        "metrics": metrics(result.metrics),
        "admissibility_failures": result.admissibility_failures,
        "slices": {
            dimension: {value: {"n": s.n, "metrics": metrics(s.metrics)} for value, s in values.items()}
            for dimension, values in result.slices.items()
        },
    }


def close(actual, expected, path="result"):
    """Equal structure, equal integers and None, floats equal to 1e-9 — never a NaN."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), path
        for key in expected:
            close(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, float):
        assert isinstance(actual, float) and not math.isnan(actual), path
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12), path
    else:
        assert actual == expected and type(actual) is type(expected), path


# -- generated traces ------------------------------------------------------------------------------

KNOWN = ["pol#1", "pol#2", "fin#1"]
KEYS = list(layered_oracle.DEFAULT_REQUIRED_VERSIONS)  # the harness's version keys, the default
IDS = st.sampled_from([*KNOWN, "ghost#1"])
MOSTLY = st.sampled_from([True] * 6 + [False])
WORDS = st.sampled_from(
    ["release", "freeze", "manager", "approves", "revenue", "数据", "-", "FY2024", "2025H1", "2024 年 上半年",
     "FY 2023 Q4", "9999%", "8.18b", "slide=5,table=1", "１２", "２０２５年", "\u3000", "12025", "v2"]
)  # fmt: skip
TEXT = st.lists(WORDS, max_size=5).map(" ".join)
# Short answers too: a refusal whose only digits are full-width, or only a period, must come up often.
PROBES = st.sampled_from(
    ["１２", "８.１８b", "２０２５年上半年", "FY2024", "2025H1", "9999%", "slide=5,table=1"]
)
CLAIMS = st.one_of(
    st.none(), TEXT, PROBES, st.sampled_from(["not in context", " NOT in Context\n", "not in context."])
)
TAGS = st.dictionaries(
    st.sampled_from(["workflow", "topic", "region"]), st.sampled_from(["freeze", "FIN", "eu", ""]), max_size=3
)


def maybe(strategy):
    return st.one_of(st.none(), strategy)


@st.composite
def registries(draw):
    return [
        {
            "chunk_id": chunk_id,
            "document_id": None,
            "parent_id": None,
            "version": draw(st.sampled_from(["v1", "v2"])),
            "permitted": draw(MOSTLY),
            "current": draw(MOSTLY),
            "text": draw(st.lists(WORDS, min_size=1, max_size=6).map(" ".join)),
        }
        for chunk_id in KNOWN
        if draw(MOSTLY)
    ]


@st.composite
def traces(draw, registry: list[dict] | None):
    """A trace: mostly a consistent pipeline over the registry (so that admissible traces and supported
    claims are common), else stages, versions and claims drawn at random."""
    by_id = {chunk["chunk_id"]: chunk for chunk in registry or []}
    if by_id and draw(MOSTLY):
        retrieved = [chunk_id for chunk_id in by_id if draw(MOSTLY)]
        reranked = draw(st.permutations(retrieved))
        selected = [chunk_id for chunk_id in reranked if draw(MOSTLY)]
        stages = {
            "retrieved_ids": retrieved,
            "rerank_input_ids": retrieved if draw(MOSTLY) else None,
            "reranked_ids": reranked,
            "selected_context_ids": selected,
            "selected_versions": [by_id[chunk_id]["version"] for chunk_id in selected],
            "version_keys": KEYS,
        }
        texts = [by_id[chunk_id]["text"] for chunk_id in selected] + [draw(TEXT)]
        claim_text = st.sampled_from(texts)
    else:
        stages = {
            "retrieved_ids": draw(maybe(st.lists(IDS, max_size=3))),
            "rerank_input_ids": draw(maybe(st.lists(IDS, max_size=2))),
            "reranked_ids": draw(maybe(st.lists(IDS, max_size=3))),
            "selected_context_ids": draw(maybe(st.lists(IDS, max_size=2))),
            "selected_versions": draw(maybe(st.lists(st.sampled_from(["v1", "v2"]), max_size=2))),
            "version_keys": draw(maybe(st.sampled_from([KEYS, ["index"], [*KEYS, "index"]]))),
        }
        claim_text = TEXT
    ledger = st.lists(
        st.fixed_dictionaries(
            {
                "text": maybe(claim_text),
                "citation_id": maybe(IDS),
                "support_phrases": st.one_of(st.just([]), st.lists(WORDS, max_size=1)),
                "answer_point": st.none(),
            }
        ),
        max_size=2,
    )
    tags = draw(maybe(TAGS))
    return {
        "qid": draw(st.text("r0123", min_size=1, max_size=3)),
        "claim": draw(st.one_of(CLAIMS, claim_text)),
        "citations": draw(
            maybe(st.lists(st.sampled_from([*(stages["retrieved_ids"] or []), "ghost#1"]), max_size=2))
        ),
        **stages,
        "claims": draw(maybe(ledger)),
        "outcome_refused": draw(maybe(st.booleans())),
        "latency_ms": draw(maybe(st.one_of(st.floats(0, 5000), st.integers(0, 50).map(float)))),
        "prompt_tokens": draw(maybe(st.integers(0, 10**6))),
        "completion_tokens": draw(maybe(st.integers(0, 10**4))),
        "tags": None if tags is None else sorted(tags.items()),
    }


@st.composite
def scenarios(draw):
    """Traces and, or not, the registry they retrieve from."""
    registry = draw(maybe(registries()))
    return draw(st.lists(traces(registry), max_size=12)), registry


def evidence_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=EVIDENCE_SCHEMA)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenarios(),
    st.one_of(st.none(), st.just(["topic", "absent"]), st.just([])),
    st.sampled_from([1, 3, production.CHUNK_ROWS]),
)
def test_the_vectorised_metrics_agree_with_the_oracle(scenario, dimensions, chunk_rows):
    rows, registry = scenario
    evidence = None if registry is None else evidence_table(registry)
    with patch.object(production, "CHUNK_ROWS", chunk_rows):  # small steps: chunk boundaries are exercised
        result = production_metrics(trace_table(rows), evidence, dimensions=dimensions)
    close(unrounded(result), oracle(rows, registry, dimensions))
    json.dumps(result.to_dict(), allow_nan=False)  # JSON-ready, and no NaN anywhere


# -- the definitions on worked examples ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fabricated"),
    [
        ("FY2024", False),
        ("2025H1", False),
        ("FY 2024 Q3 and 2024 年 上半年", False),
        ("２０２５年上半年", False),  # full-width digits read as ASCII ones
        ("not in context", False),
        ("9999%", True),
        ("Revenue was 8.18b", True),
        ("see slide=5,table=1", True),
        ("８.１８b", True),
        ("12025", True),  # the period 2025 is removed, the 1 remains
        (None, False),
    ],
)
def test_fabricated_numbers(text, fabricated):
    assert fabricated_numbers(pa.array([text], pa.string())).tolist() == [fabricated]
    assert has_fabricated_number(text) is fabricated  # the oracle reads the rule the same way


def test_fabrication_counts_numbers_left_in_refusals():
    rows = [
        {"qid": "a", "claim": "FY2024 figures are not in context", "outcome_refused": True},
        {"qid": "b", "claim": "Revenue 2025H1 was 8.18b", "outcome_refused": True},
        {"qid": "c", "claim": "not in context"},
        {"qid": "d", "claim": "Revenue was 9999", "citations": []},  # shipped: not a fabrication
    ]
    metric = production_metrics(trace_table(rows)).metrics["production_fabrication"]
    assert (metric.value, metric.n, metric.rate) == (1, 3, pytest.approx(1 / 3))


def test_a_configured_period_pattern_replaces_the_spec_one():
    rows = [{"qid": "a", "claim": "see 2025H1", "outcome_refused": True}]
    assert (
        production_metrics(trace_table(rows), period_pattern=r"20\d{2}")
        .metrics["production_fabrication"]
        .value
        == 1
    )
    with pytest.raises(ValueError, match="RE2"):
        production_metrics(trace_table(rows), period_pattern=r"(?<=FY)\d+")


def test_retrieved_citation_rate_and_compliance():
    rows = [
        {"qid": "a", "claim": "x", "citations": ["p1"], "retrieved_ids": ["p1", "p2"]},  # valid
        {"qid": "b", "claim": "x", "citations": ["p3"], "retrieved_ids": ["p1"]},  # not retrieved
        {"qid": "c", "claim": "x", "citations": [], "retrieved_ids": ["p1"]},  # compliant, not valid
        {"qid": "d", "claim": "x", "citations": None, "retrieved_ids": ["p1"]},  # neither
        {"qid": "e", "claim": "not in context", "citations": None},  # a refusal is compliant
    ]
    metrics = production_metrics(trace_table(rows)).metrics
    assert (metrics["retrieved_citation_rate"].value, metrics["retrieved_citation_rate"].n) == (0.25, 4)
    assert (metrics["production_compliance"].value, metrics["production_compliance"].n) == (0.8, 5)
    assert (metrics["refusal_rate"].value, metrics["refusal_rate"].n) == (0.2, 5)


def test_latency_percentiles_and_tokens():
    rows = [
        {"qid": "a", "latency_ms": 100.0, "prompt_tokens": 10, "completion_tokens": 1},
        {"qid": "b", "latency_ms": 200.0, "prompt_tokens": 30},
        {"qid": "c", "latency_ms": 400.0},
        {"qid": "d"},
    ]
    metrics = production_metrics(trace_table(rows)).metrics
    latencies = [100.0, 200.0, 400.0]
    assert metrics["latency_p50_ms"].value == np.percentile(latencies, 50) == 200.0
    assert metrics["latency_p95_ms"].value == pytest.approx(np.percentile(latencies, 95))  # 380.0
    assert metrics["latency_p50_ms"].n == 3
    assert (metrics["prompt_tokens_mean"].value, metrics["prompt_tokens_mean"].n) == (20.0, 2)
    assert (metrics["completion_tokens_mean"].value, metrics["completion_tokens_mean"].n) == (1.0, 1)
    assert (metrics["tokens_total"].value, metrics["tokens_total"].n) == (41, 2)


def test_empty_input_has_no_nan_and_no_placeholder_only_nulls_with_their_denominator():
    report = production_metrics(trace_table([]), dimensions=["topic"]).to_dict()
    assert report == {
        "n": 0,
        "metrics": {
            "refusal_rate": {"value": None, "n": 0, "successes": 0, "low": 0.0, "high": 1.0},
            "production_compliance": {"value": None, "n": 0, "successes": 0, "low": 0.0, "high": 1.0},
            "retrieved_citation_rate": {"value": None, "n": 0, "successes": 0, "low": 0.0, "high": 1.0},
            "production_fabrication": {"value": 0, "n": 0, "rate": None, "low": 0.0, "high": 1.0},
            "latency_p50_ms": {"value": None, "n": 0},
            "latency_p95_ms": {"value": None, "n": 0},
            "prompt_tokens_mean": {"value": None, "n": 0},
            "completion_tokens_mean": {"value": None, "n": 0},
            "tokens_total": {"value": 0, "n": 0},
        },
        "admissibility_failures": {},
        "slices": {"topic": {}},
    }


def test_registry_metrics_and_failures():
    evidence = evidence_table(
        [
            {"chunk_id": "ok#1", "document_id": None, "parent_id": None, "version": "v1", "permitted": True,
             "current": True, "text": "The release manager approves any freeze exception in writing."},
            {"chunk_id": "hr#1", "document_id": None, "parent_id": None, "version": "v1", "permitted": False,
             "current": True, "text": "Salaries of named staff."},
        ]
    )  # fmt: skip
    base = {"selected_versions": ["v1"], "version_keys": KEYS}
    rows = [
        {"qid": "a", "claim": "The release manager approves exceptions.", "citations": ["ok#1"],
         "retrieved_ids": ["ok#1"], **base},
        {"qid": "b", "claim": "Salaries are public.", "citations": ["hr#1"], "retrieved_ids": ["hr#1"],
         **base},
        {"qid": "c", "claim": "not in context", "retrieved_ids": ["gone#1"], "selected_versions": [],
         "version_keys": ["index"]},
    ]  # fmt: skip
    result = production_metrics(trace_table(rows), evidence)
    admissible, faithful = (
        result.metrics["production_admissible_rate"],
        result.metrics["lexical_faithfulness"],
    )
    assert (admissible.value, admissible.n) == (pytest.approx(1 / 3), 3)
    assert (faithful.value, faithful.n) == (0.5, 2)  # the refusal has no claims to judge
    failures = result.admissibility_failures
    assert set(failures) == set(RULES) and "missing_trace" not in failures
    assert {rule: count for rule, count in failures.items() if count} == {
        "version_count": 1,
        "missing_version": 1,
        "unknown_chunk": 1,
        "restricted": 1,
    }


def test_without_a_registry_the_registry_metrics_are_not_reported():
    result = production_metrics(trace_table([{"qid": "a", "claim": "x"}]))
    assert production.REGISTRY_METRICS == ("production_admissible_rate", "lexical_faithfulness")
    assert not set(production.REGISTRY_METRICS) & set(result.metrics)
    assert result.admissibility_failures == {}


def test_to_dict_shape_and_rounding():
    rows = [
        {"qid": "a", "claim": "x", "citations": [], "latency_ms": 100.123456, "tags": [("topic", "FIN")]},
        {"qid": "b", "claim": "not in context", "latency_ms": 7.0,
         "tags": [("topic", "FIN"), ("workflow", "x")]},
        {"qid": "c", "claim": "y", "tags": [("topic", "HR")]},
    ]  # fmt: skip
    report = production_metrics(trace_table(rows)).to_dict()
    assert list(report) == ["n", "metrics", "admissibility_failures", "slices"]
    assert list(report["metrics"]) == [
        "refusal_rate", "production_compliance", "retrieved_citation_rate", "production_fabrication",
        "latency_p50_ms", "latency_p95_ms", "prompt_tokens_mean", "completion_tokens_mean", "tokens_total",
    ]  # fmt: skip
    assert report["metrics"]["refusal_rate"] == {
        "value": 0.3333,
        "n": 3,
        "successes": 1,
        "low": 0.0615,
        "high": 0.7923,
    }
    assert report["metrics"]["latency_p50_ms"] == {"value": 53.5617, "n": 2}
    assert list(report["slices"]) == ["topic", "workflow"]
    assert list(report["slices"]["topic"]) == ["FIN", "HR"]
    fin = report["slices"]["topic"]["FIN"]
    assert fin["n"] == 2 and fin["metrics"]["refusal_rate"]["value"] == 0.5
    assert list(fin["metrics"]) == list(report["metrics"])
    # A slice reports exactly what the same traces report on their own.
    alone = production_metrics(trace_table(rows[1:2])).to_dict()
    assert report["slices"]["workflow"] == {"x": {"n": 1, "metrics": alone["metrics"]}}


# -- the refusal rule: outcome.refused makes a refusal for every scorer -----------------------------


def test_outcome_refused_is_a_refusal_for_grounded_and_layered_scoring(tmp_path):
    gold_path = tmp_path / "gold.jsonl"
    gold_path.write_text(
        json.dumps({"qid": "u1", "question": "q", "answerable": False, "gold_citations": []}) + "\n"
    )
    trace_path = tmp_path / "traces.jsonl"
    trace_path.write_text(
        json.dumps({"qid": "u1", "answer": "I cannot say", "outcome": {"refused": True}, "retrieved_ids": []})
        + "\n"
    )
    gold, traces = load_gold(gold_path).table, load_traces(trace_path).table
    assert score_grounded(gold, traces).cases.column("label").to_pylist() == ["REFUSAL_OK"]
    evidence = evidence_table([])
    assert score_layered(gold, traces, evidence).cases.column("refused").to_pylist() == [True]
    not_refused = traces.set_column(
        traces.schema.get_field_index("outcome_refused"), "outcome_refused", pa.array([False])
    )
    assert score_grounded(gold, not_refused).cases.column("label").to_pylist() == ["HALLUCINATION"]


def test_tables_without_the_outcome_column_still_score():
    gold = gold_table([{"qid": "a", "answerable": False}])
    traces = trace_table([{"qid": "a", "claim": "not in context"}]).drop_columns(["outcome_refused"])
    assert score_grounded(gold, traces).cases.column("label").to_pylist() == ["REFUSAL_OK"]
