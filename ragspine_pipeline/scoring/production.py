r"""Reference-free metrics on sampled production traces (docs/metrics.md).

Production traces have no gold answer. What can still be measured is whether the service behaves — it
refuses, cites, stays inside its own retrieval, uses admissible evidence, does not invent numbers while
refusing, says what its evidence says — and what it costs. Every figure is given for all traces and for
every slice (one value of one tag dimension, e.g. ``workflow=release-freeze``), with its denominator n and,
for rates, a 95 % Wilson interval (``scoring.stats``).

Notation: T = the traces (every row counts; de-duplicating request ids is the sampler's job),
R = refusals (``outcome.refused`` when the trace carries it, else the claim stripped of Unicode
whitespace is ``not in context`` in any case: ``scoring.grounded.refusals``), S = T \ R the shipped
answers.

Each metric as value; denominator n (the registry, ``ragspine_pipeline.metrics``, holds them all):

* ``refusal_rate`` = |R| / |T|; n = |T|.
* ``production_compliance`` = |{t ∈ T : t carries a citation list, or t ∈ R}| / |T| (the grounded
  rule, ``grounded.compliant``, over the sampled traces); n = |T|.
* ``retrieved_citation_rate`` = |{t ∈ S : citations non-empty and ⊆ retrieved ids}| / |S|; n = |S|.
* ``production_admissible_rate`` (with a registry) = |{t ∈ T : admissible}| / |T|; n = |T|.
* ``production_fabrication`` = the count |{t ∈ R : a number remains}|, with ``rate`` = count / |R|;
  n = |R|.
* ``lexical_faithfulness`` (with a registry, or traces that carry their ``contexts``) = claims of S
  supported by a selected chunk / claims of S; n = claims of S. Without a registry, a trace's own
  ``contexts`` are its selected chunks, and only the answers that carry some are counted. The claims of
  one answer are not independent, so the entry also carries an ``effective_n`` (cluster-robust: the
  number of independent observations the claims are worth), which the nightly drop test uses instead
  of n.
* ``latency_p50_ms``, ``latency_p95_ms`` = the 50th / 95th percentile of ``latency_ms``; n = traces with
  a latency.
* ``prompt_tokens_mean``, ``completion_tokens_mean`` = the mean count; n = traces with that count.
* ``tokens_total`` = Σ prompt tokens + Σ completion tokens; n = traces with either count (0 without).

Edge cases and readings, stated once:

* An empty denominator makes the figure not applicable: its value (a count's ``rate``) is None — JSON
  ``null`` — reported with n = 0 and the whole [0, 1] as its interval; never a placeholder, never NaN.
  A count is 0 when nothing was counted.
* Retrieved ids are the first stage (``retrieved_ids``); a trace without them has retrieved nothing, so
  any citation it makes is invalid.
* **Admissible**: every admissibility rule that needs no gold (``scoring.admissibility``; a trace without
  gold has no case id to match, so ``missing_trace`` never applies). ``admissibility_failures`` counts the
  traces breaking each rule; a trace may break several.
* **Fabrication**: the answer text of a refusal is NFKC-normalised (full-width digits and spaces read as
  ASCII ones, so ``２０２５年`` is the period 2025年), then the rule of ``scoring.fabrication`` applies:
  reporting periods removed with ``period_pattern`` (``FY2024``, ``2025H1``, ``2024 年 上半年``), any
  remaining Unicode digit is a fabricated number (``9999%``, ``8.18b``, ``slide=5,table=1``).
* **Lexical faithfulness**: a shipped answer's claims are its claim ledger, else its text as one claim;
  a claim is supported by a chunk under the layered rule (a ledger claim: every one of its support
  phrases in the chunk's registry text, an empty list met by any; the text claim: ≥ 60 % of its word
  tokens) — ``scoring.layered.claim_support``. Selected chunks are
  ``selected_context_ids``, else the retrieved ids. Claims are pooled over traces.
* **Percentiles** interpolate linearly between the closest ranks (numpy's default): for m sorted values
  x₀ ≤ … ≤ x_{m-1}, h = (m - 1)·q and the value is x_⌊h⌋ + (h - ⌊h⌋)·(x_⌊h⌋+1 - x_⌊h⌋).
  A latency that is null (or not finite, in a table not built by the loader) is not a measurement.
* **Slices**: every (dimension, value) pair of the traces' ``tags`` (all dimensions, or those asked for; a
  dimension asked for that no trace carries is listed empty). A trace without a tag is in no slice of
  that dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.metrics import family, is_count, names, ratio
from ragspine_pipeline.scoring import fabrication, rowwise
from ragspine_pipeline.scoring.admissibility import ADMISSIBILITY_RULES, Registry, admissibility
from ragspine_pipeline.scoring.claims import answer_claims, claim_support
from ragspine_pipeline.scoring.fabrication import PERIOD_PATTERN, check_period_pattern
from ragspine_pipeline.scoring.grounded import compliant, refusals
from ragspine_pipeline.scoring.layered import DEFAULT_REQUIRED_VERSIONS
from ragspine_pipeline.scoring.production_results import (
    Count,
    Metric,
    MetricSet,
    ProductionMetrics,
    Rate,
    Statistic,
)
from ragspine_pipeline.scoring.stats import wilson_interval

# Rules that need no gold: production traces have no case id to match.
GOLD_FREE_RULES = tuple(rule for rule in ADMISSIBILITY_RULES if rule != "missing_trace")

METRIC_NAMES = names("production")  # every production metric, in report order (``ragspine_pipeline.metrics``)
REGISTRY_METRICS = tuple(m.name for m in family("production") if m.requires_registry)
"""Reported only when an evidence registry is given."""
# The proportions: each a rate of its numerator over its denominator (``traces``: every sampled trace),
# and the count of fabricating refusals, reported with its rate.
PROPORTIONS = tuple(m for m in family("production") if m.kind in ("rate", "count"))

CHUNK_ROWS = 1 << 14
"""Traces scored per step: bounds the claim × chunk × token pairs of claim support, as in ``layered``."""

# -- the metrics -----------------------------------------------------------------------------------


# The rates that need what retrieval returned: not reported for a service whose citations are all it
# says of retrieval (``citations_are_retrieved`` in the gates config).
RETRIEVAL_RATES = ("retrieved_citation_rate",)


def production_metrics(
    traces: pa.Table,
    evidence: pa.Table | None = None,
    *,
    dimensions: Sequence[str] | None = None,
    required_versions: Sequence[str] = DEFAULT_REQUIRED_VERSIONS,
    period_pattern: str = PERIOD_PATTERN,
    citations_are_retrieved: bool = False,
) -> ProductionMetrics:
    """Production metrics of canonical trace columns (``contracts.columns.load_traces``), overall and per
    slice; definitions, denominators and empty-denominator values in the module docstring.

    Parameters
    ----------
    traces : the canonical trace table (``TRACE_SCHEMA``).
    evidence : the evidence registry (``EVIDENCE_SCHEMA``); without it ``production_admissible_rate``
        and ``lexical_faithfulness`` are not reported and ``admissibility_failures`` is empty.
    dimensions : tag dimensions to slice by; None slices by every tag key found.
    required_versions : version keys every trace must carry (admissibility).
    period_pattern : the regular expression (RE2 syntax) of period tokens removed before looking for
        fabricated numbers (``scoring.fabrication``).
    citations_are_retrieved : the traces list only the sources the answer used, not what retrieval
        returned (the gates config says so): ``retrieved_citation_rate`` is not reported (it would be a
        0 the service never earned, or a 1 by construction).

    Raises ValueError when ``period_pattern`` is not a valid RE2 expression.
    """
    _check_pattern(period_pattern)
    registry = None if evidence is None else Registry(evidence)
    n = traces.num_rows
    parts = [
        _per_trace(traces.slice(start, CHUNK_ROWS), registry, required_versions, period_pattern)
        for start in range(0, n, CHUNK_ROWS)
    ] or [_per_trace(traces, registry, required_versions, period_pattern)]
    per_trace = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    # Faithfulness is judged against the registry, else against the traces' own contexts when some carry them.
    faithful = registry is not None or bool(
        "context_ids" in traces.column_names and pc.sum(pc.is_valid(traces.column("context_ids"))).as_py()
    )
    omit = RETRIEVAL_RATES if citations_are_retrieved else ()
    (overall,) = _metric_sets(
        per_trace, np.arange(n), np.zeros(n, dtype=np.int64), 1, registry is not None, faithful, omit
    )
    rows, groups, labels = _slice_membership(traces.column("tags"), dimensions)
    slices: dict[str, dict[str, MetricSet]] = {dimension: {} for dimension in dimensions or ()}
    for (dimension, value), metric_set in zip(
        labels,
        _metric_sets(per_trace, rows, groups, len(labels), registry is not None, faithful, omit),
        strict=True,
    ):
        slices.setdefault(dimension, {})[value] = metric_set
    failures = {} if registry is None else {rule: int(per_trace[rule].sum()) for rule in GOLD_FREE_RULES}
    return ProductionMetrics(n=n, metrics=overall.metrics, admissibility_failures=failures, slices=slices)


def fabricated_numbers(text: pa.Array, period_pattern: str = PERIOD_PATTERN) -> np.ndarray:
    """Per text: a number remains after NFKC normalisation and removing the reporting periods of
    ``period_pattern``. A null text has none."""
    return fabrication.fabricated(pc.utf8_normalize(text, form="NFKC"), period_pattern)


def _check_pattern(pattern: str) -> None:
    problem = check_period_pattern(pattern)
    if problem:
        raise ValueError(f"period_pattern is not a valid RE2 expression: {problem}")


def _per_trace(traces: pa.Table, registry: Registry | None, required_versions, period_pattern) -> dict:
    """Per-trace flags and measurements (numpy arrays aligned with the rows of ``traces``)."""
    n = traces.num_rows
    t = {name: traces.column(name).combine_chunks() for name in traces.column_names}
    refused = refusals(rowwise.lower(pc.fill_null(t["claim"], "")), t["outcome_refused"])
    shipped = ~refused
    citations, retrieved = t["citations"], t["retrieved_ids"]

    n_cited = np.asarray(pc.fill_null(pc.list_value_length(citations), 0))
    citation_valid = shipped & (n_cited > 0) & rowwise.all_in(citations, retrieved)

    fabricated = np.zeros(n, dtype=bool)
    fabricated[refused] = fabricated_numbers(t["claim"].filter(pa.array(refused)), period_pattern)

    latency = t["latency_ms"]
    has_latency = np.asarray(pc.fill_null(pc.is_finite(latency), False), dtype=bool)
    out = {
        "refused": refused,
        "compliant": compliant(citations, refused),
        "shipped": shipped,
        "citation_valid": citation_valid,
        "fabricated": fabricated,
        "has_latency": has_latency,
        # Zero where there is no measurement: masked by has_latency, and never a NaN to leak.
        "latency": np.where(has_latency, np.asarray(pc.fill_null(latency, 0.0), dtype=float), 0.0),
    }
    for name in ("prompt_tokens", "completion_tokens"):
        out[f"has_{name}"] = np.asarray(t[name].is_valid())
        out[name] = np.asarray(pc.fill_null(t[name], 0), dtype=np.int64)
    if registry is not None:
        selected = pc.coalesce(t["selected_context_ids"], retrieved)
        violations = admissibility(
            t, retrieved, selected, np.zeros(n, dtype=bool), registry, required_versions
        )
        out.update({rule: violations[rule] for rule in GOLD_FREE_RULES})
        out["admissible"] = ~np.any(np.stack([violations[rule] for rule in GOLD_FREE_RULES]), axis=0)
        claims = answer_claims(t, refused, n)
        support = claim_support(claims, selected, registry)
        out["claims"] = np.bincount(claims.rows, minlength=n)
        out["supported"] = np.bincount(claims.rows[support.by_selected], minlength=n)
    elif "context_ids" in t:
        # Without a registry, a trace's own contexts are the evidence of its answer: only the answers
        # that carry some are judged.
        contexts, given = _context_registry(t["context_ids"], t["context_texts"])
        claims = answer_claims(t, refused | ~given, n)
        support = claim_support(claims, contexts.selected, contexts.registry)
        out["claims"] = np.bincount(claims.rows, minlength=n)
        out["supported"] = np.bincount(claims.rows[support.by_selected], minlength=n)
    return out


@dataclass(frozen=True)
class _Contexts:
    registry: Registry
    selected: pa.Array


def _context_registry(ids: pa.Array, texts: pa.Array) -> tuple[_Contexts, np.ndarray]:
    """The traces' own passages as a registry of their own (a passage's id made unique per trace, so
    that two traces may give the same id different texts) and each trace's list of them; and which
    traces carry at least one."""
    n = len(ids)
    lengths = np.asarray(pc.fill_null(pc.list_value_length(ids), 0), dtype=np.int64)
    rows = np.repeat(np.arange(n), lengths)
    unique = pc.binary_join_element_wise(
        pa.array(rows.astype(str)), pc.cast(pc.list_flatten(ids), pa.string()), "\x1f"
    )
    evidence = pa.table(
        {
            "chunk_id": unique,
            "version": pa.nulls(len(unique), pa.string()),
            "permitted": pa.array(np.ones(len(unique), dtype=bool)),
            "current": pa.array(np.ones(len(unique), dtype=bool)),
            "text": pc.fill_null(pc.list_flatten(texts), ""),
        }
    )
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    selected = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), unique)
    return _Contexts(Registry(evidence), selected), lengths > 0


def _metric_sets(
    per_trace: dict,
    rows: np.ndarray,
    groups: np.ndarray,
    n_groups: int,
    with_registry: bool,
    with_faithfulness: bool,
    omit: Sequence[str] = (),
) -> list[MetricSet]:
    """The metrics of each group, where trace ``rows[i]`` belongs to group ``groups[i]``; none of
    ``omit``."""

    def total(name: str) -> np.ndarray:
        # Float weights sum integers exactly below 2**53 (token totals included), then back to int.
        return np.bincount(groups, weights=per_trace[name][rows], minlength=n_groups).astype(np.int64)

    n = np.bincount(groups, minlength=n_groups)
    figures = {
        m.name: _rates(m.name, total(m.numerator), n if m.denominator == "traces" else total(m.denominator))
        for m in PROPORTIONS
        if m.name not in omit
        and (
            with_registry
            or not m.requires_registry
            or (with_faithfulness and m.name == "lexical_faithfulness")
        )
    }
    if with_faithfulness:
        effective = _clustered_effective_n(per_trace, rows, groups, n_groups)
        figures["lexical_faithfulness"] = [
            Rate(r.value, r.n, r.low, r.high, float(e))
            for r, e in zip(figures["lexical_faithfulness"], effective, strict=True)
        ]

    latency_rows = per_trace["has_latency"][rows]
    latency_n = np.bincount(groups[latency_rows], minlength=n_groups)
    latency = per_trace["latency"][rows][latency_rows]
    p50 = _grouped_percentile(groups[latency_rows], latency, n_groups, 0.50)
    p95 = _grouped_percentile(groups[latency_rows], latency, n_groups, 0.95)
    prompt_n, completion_n = total("has_prompt_tokens"), total("has_completion_tokens")
    prompt, completion = total("prompt_tokens"), total("completion_tokens")
    with_tokens = np.bincount(
        groups,
        weights=(per_trace["has_prompt_tokens"] | per_trace["has_completion_tokens"])[rows],
        minlength=n_groups,
    ).astype(np.int64)

    sets = []
    for g in range(n_groups):  # one Python step per slice, not per trace
        metrics: dict[str, Metric] = {name: figures[name][g] for name in METRIC_NAMES if name in figures}
        metrics["latency_p50_ms"] = Statistic(_or_none(p50[g], latency_n[g]), int(latency_n[g]))
        metrics["latency_p95_ms"] = Statistic(_or_none(p95[g], latency_n[g]), int(latency_n[g]))
        metrics["prompt_tokens_mean"] = Statistic(_mean(prompt[g], prompt_n[g]), int(prompt_n[g]))
        metrics["completion_tokens_mean"] = Statistic(
            _mean(completion[g], completion_n[g]), int(completion_n[g])
        )
        metrics["tokens_total"] = Statistic(int(prompt[g] + completion[g]), int(with_tokens[g]))
        sets.append(MetricSet(n=int(n[g]), metrics=metrics))
    return sets


def _clustered_effective_n(
    per_trace: dict, rows: np.ndarray, groups: np.ndarray, n_groups: int
) -> np.ndarray:
    """Per group, how many independent observations the pooled claims of lexical faithfulness are
    worth: R(1 − R) / Var(R) with the cluster-robust variance of the ratio R = Σs / Σm over answers with
    claims (s supported of m claims), Var(R) = a/(a − 1) · Σ(s − R m)² / (Σm)² over the a answers.

    At most the number of claims; the number of answers where the variance is 0 (R is 0 or 1, or a
    single answer), which claims no more independence than one observation per answer.
    """
    m = per_trace["claims"][rows].astype(float)
    s = per_trace["supported"][rows].astype(float)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(groups, weights=values, minlength=n_groups)

    claims, supported = total(m), total(s)
    answers = total((m > 0).astype(float))
    ratio = np.divide(supported, claims, out=np.zeros(n_groups), where=claims > 0)
    residual = total((s - ratio[groups] * m) ** 2)  # per answer, not by expanding the square: no cancellation
    variance = np.where(
        answers > 1, answers / np.maximum(answers - 1, 1) * residual / np.maximum(claims, 1) ** 2, 0.0
    )
    positive = variance > 1e-15
    effective = np.where(positive, ratio * (1 - ratio) / np.where(positive, variance, 1.0), answers)
    return np.minimum(effective, claims)


def _rates(name: str, successes: np.ndarray, n: np.ndarray) -> list[Metric]:
    value = [ratio(k, m) for k, m in zip(successes.tolist(), n.tolist(), strict=True)]  # one per slice
    low, high = wilson_interval(successes, n)
    if is_count(name):
        return [
            Count(int(k), int(m), v, float(lo), float(hi))
            for k, m, v, lo, hi in zip(successes, n, value, low, high, strict=True)
        ]
    return [Rate(v, int(m), float(lo), float(hi)) for m, v, lo, hi in zip(n, value, low, high, strict=True)]


def _or_none(value: float, n: int) -> float | None:
    return float(value) if n > 0 else None


def _mean(total: int, n: int) -> float | None:
    return float(total / n) if n > 0 else None


def _grouped_percentile(groups: np.ndarray, values: np.ndarray, n_groups: int, q: float) -> np.ndarray:
    """The q-quantile of each group's values, linear between closest ranks; 0.0 for an empty group (the
    caller reports None there)."""
    counts = np.bincount(groups, minlength=n_groups)
    result = np.zeros(n_groups)
    if len(values) == 0:
        return result
    ordered = values[np.lexsort((values, groups))]  # by group, then value
    starts = np.cumsum(counts) - counts
    has = counts > 0
    h = (counts[has] - 1) * q
    below = np.floor(h).astype(np.int64)
    above = np.minimum(below + 1, counts[has] - 1)
    low, high = ordered[starts[has] + below], ordered[starts[has] + above]
    result[has] = low + (h - below) * (high - low)
    return result


def _slice_membership(
    tags: pa.ChunkedArray | pa.Array, dimensions: Sequence[str] | None
) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """``(rows, groups, labels)``: trace ``rows[i]`` is in slice ``labels[groups[i]]`` (a (dimension,
    value) pair); labels sorted by dimension, then value."""
    tags = tags.combine_chunks() if isinstance(tags, pa.ChunkedArray) else tags
    n = len(tags)
    offsets = np.asarray(tags.offsets, dtype=np.int64)  # absolute positions in .keys, even if sliced
    lengths = np.where(np.asarray(tags.is_valid()), np.diff(offsets), 0)
    rows = np.repeat(np.arange(n), lengths)
    entries = np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths - offsets[:-1], lengths)
    keys, values = tags.keys.take(pa.array(entries)), tags.items.take(pa.array(entries))
    wanted = np.asarray(values.is_valid())  # the loader drops null tags; a hand-built map may not
    if dimensions is not None:
        wanted &= np.asarray(pc.is_in(keys, value_set=pa.array(list(dimensions), pa.string())), dtype=bool)
    keys, values, rows = keys.filter(pa.array(wanted)), values.filter(pa.array(wanted)), rows[wanted]
    if len(rows) == 0:
        return rows, rows, []
    key_codes, key_names = _sorted_codes(keys)
    value_codes, value_names = _sorted_codes(values)
    pair = key_codes * len(value_names) + value_codes  # ordered by (dimension, value)
    # One membership per trace and slice, even if a hand-built map repeats a key.
    unique_pairs, groups = np.unique(pair, return_inverse=True)
    member = np.unique(groups * n + rows)
    labels = [(key_names[p // len(value_names)], value_names[p % len(value_names)]) for p in unique_pairs]
    return member % n, member // n, labels


def _sorted_codes(strings: pa.Array) -> tuple[np.ndarray, list[str]]:
    """Each string's rank among the distinct strings (code-point order), and those strings in order."""
    encoded = pc.dictionary_encode(strings)
    order = np.asarray(pc.sort_indices(encoded.dictionary))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[np.asarray(encoded.indices)], encoded.dictionary.take(pa.array(order)).to_pylist()
