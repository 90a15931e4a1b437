"""Every metric of the pipeline, defined once (docs/metrics.md).

Each :class:`Metric` says what it is: its ``name`` (unique across every family), its ``family``, its
``formula``, the keys of its ``numerator`` and ``denominator`` (``case_denominator`` for a mean of
per-case ratios), when it ``applies``, which way is better (``direction``), whether it is a rate, a count,
a judged score or a statistic (``kind``), its default gate, and the old or short names it still answers to
(``aliases``). Scoring modules, gates, baselines, reports and alerts derive their metric lists from here.
It imports only the standard library, so the CLI's parser and the judge's prompts read it without
loading the scoring stack (it sits below ``contracts``, like ``errors``).

**Not applicable.** A metric whose denominator is 0 has the value ``None`` (JSON ``null``), reported
with its denominator: never a placeholder such as 1.0 or 0.0, never NaN (:func:`ratio`). A gate on it
neither passes nor fails, a baseline skips it, a report shows ``n/a``. A count (``kind="count"``) always
applies: nothing counted is 0.

**Names and scopes.** A name is read in a :class:`Scope`: a golden run (with or without an evidence
registry, or not yet known) or a nightly production summary. In its scope a name is a metric's own name
or one of its aliases; an alias may stand for different metrics in different scopes (``faithfulness``
is the layered claim metric in a run with an evidence registry and RAGSpine's narrative gate in a run
without one; ``compliance`` in a production summary written before the rename is
``production_compliance``). ``decision.gates.canonical_metric`` is the one resolver of names.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

Family = Literal["grounded", "layered", "qa", "narrative", "canary", "judge", "production"]
Kind = Literal["rate", "count", "score", "statistic"]


class Scope(StrEnum):
    """Where a metric name is read (what an alias stands for may depend on it)."""

    GOLDEN = "golden run"  # whether it has an evidence registry is not known
    WITH_REGISTRY = "golden run with an evidence registry"
    WITHOUT_REGISTRY = "golden run without an evidence registry"
    PRODUCTION = "production summary"


GOLDEN_SCOPES = frozenset({Scope.GOLDEN, Scope.WITH_REGISTRY, Scope.WITHOUT_REGISTRY})
GOLDEN_FAMILIES: tuple[Family, ...] = ("grounded", "layered", "qa", "narrative", "canary", "judge")
FAMILIES_IN: dict[Scope, tuple[Family, ...]] = {
    **{scope: GOLDEN_FAMILIES for scope in GOLDEN_SCOPES},
    Scope.PRODUCTION: ("production",),
}


@dataclass(frozen=True)
class Metric:
    """One metric: see the module docstring. ``default_gate`` is ``(op, threshold)`` when the metric is
    gated by default (for the dialect of its family); ``aliases`` maps each old name to the scopes in which
    it stands for this metric."""

    name: str
    family: Family
    formula: str
    applies: str
    numerator: str | None = None
    denominator: str | None = None
    case_denominator: str | None = None
    direction: Literal["higher", "lower"] = "higher"
    kind: Kind = "rate"
    default_gate: tuple[str, float] | None = None
    requires_registry: bool = False
    aliases: Mapping[str, frozenset[Scope]] = field(default_factory=dict)
    short_names: tuple[str, ...] = ()  # abbreviations, in every golden scope: ``under``, ``recall``
    # The trace fields its value depends on: when no trace carries one, the value is a silent 0, said so
    # (``absent_inputs``): a citation hit needs the cited ids among the retrieved ones.
    trace_fields: tuple[str, ...] = ()

    def other_names(self) -> dict[str, frozenset[Scope]]:
        """Every alias with the scopes it stands for this metric in: short names and old names."""
        return {**{short: GOLDEN_SCOPES for short in self.short_names}, **self.aliases}

    @property
    def lower_is_better(self) -> bool:
        return self.direction == "lower"


def _golden(*aliases: str) -> dict[str, frozenset[Scope]]:
    return {alias: GOLDEN_SCOPES for alias in aliases}


def _production(*aliases: str) -> dict[str, frozenset[Scope]]:
    return {alias: frozenset({Scope.PRODUCTION}) for alias in aliases}


_SHIPPED = "some answer shipped (S non-empty)"
_ANSWERABLE = "some case is answerable (A non-empty)"
_CLAIMS = "per case, an answerable case answered with claims; the mean over those cases"
_QA_CASE = "the golden set has a QA case"
_NARRATIVE = "some QA case is a narrative case (case_type: narrative)"

METRICS: tuple[Metric, ...] = (
    # -- grounded QA: S shipped answers, R refusals, A answerable cases, U unanswerable ones -------------
    Metric("precision", "grounded", "|{x ∈ S ∩ A : C ∧ H}| / |S|", _SHIPPED,
           "shipped_answerable_correct", "answered", default_gate=(">=", 0.80),
           trace_fields=("citations", "retrieved_ids")),
    Metric("chr", "grounded", "|{x ∈ S ∩ A : H}| / |S|", _SHIPPED,
           "shipped_answerable_hit", "answered", default_gate=(">=", 0.75),
           trace_fields=("citations", "retrieved_ids")),
    Metric("under_refusal", "grounded", "|S ∩ U| / |U|", "some case is unanswerable (U non-empty)",
           "shipped_unanswerable", "unanswerable", direction="lower", default_gate=("<=", 0.05),
           short_names=("under",)),
    Metric("over_refusal", "grounded", "|R ∩ A| / |A|", _ANSWERABLE,
           "refused_answerable", "answerable", direction="lower", default_gate=("<=", 0.10),
           short_names=("over",)),
    Metric("recall@k", "grounded", "|{x ∈ A : gold_citations ⊆ top-k(retrieved ids)}| / |A|", _ANSWERABLE,
           "answerable_recalled", "answerable", short_names=("recall",), trace_fields=("retrieved_ids",)),
    Metric("compliance", "grounded",
           "matched traces whose answer carries a citation list or is a refusal / matched traces",
           "some gold case has a trace", "compliant", "matched", default_gate=(">=", 0.98)),
    Metric("chr_answerable", "grounded", "|{x ∈ A : shipped ∧ citations ∩ gold_citations ≠ ∅}| / |A|",
           _ANSWERABLE, "answerable_cites_gold", "answerable", trace_fields=("citations",)),
    Metric("claim_containment", "grounded",
           "answerable cases with a gold claim, shipped, whose answer contains a ≥5-character phrase of "
           "the gold claim / answerable cases with a gold claim",
           "some answerable case has a gold claim", "answerable_phrase_contained",
           "answerable_with_gold_claim"),
    # -- layered: means over the cases where each per-case ratio applies -------------------------------
    Metric("candidate_recall", "layered", "|first_stage ∩ required| / |required|",
           "per case, something is required and the trace has a first stage", case_denominator="n_required",
           requires_registry=True),
    Metric("context_recall", "layered", "|selected ∩ required| / |required|",
           "per case, something is required", case_denominator="n_required", requires_registry=True),
    Metric("context_precision", "layered", "|selected ∩ required| / |selected| (0 for an empty selection)",
           "per case, it has a trace", case_denominator="n_selected", requires_registry=True),
    Metric("claim_faithfulness", "layered", "claims supported by some selected chunk / claims", _CLAIMS,
           case_denominator="n_claims", requires_registry=True,
           aliases={"faithfulness": frozenset({Scope.WITH_REGISTRY})}),
    Metric("citation_coverage", "layered", "claims with a citation / claims", _CLAIMS,
           case_denominator="n_claims", requires_registry=True),
    Metric("citation_support", "layered", "claims whose cited chunk is selected and supports them / claims",
           _CLAIMS, case_denominator="n_claims", requires_registry=True),
    Metric("point_coverage", "layered", "|answer points of supported claims ∩ required_points| / "
           "|required_points|", "per case, as claim_faithfulness, when it requires points",
           case_denominator="n_points", requires_registry=True),
    Metric("admissible_rate", "layered", "admissible cases / cases", "the golden set has a case",
           "admissible", "cases", requires_registry=True),
    Metric("releasable_rate", "layered", "releasable cases / cases", "the golden set has a case",
           "releasable", "cases", requires_registry=True),
    # -- RAGSpine's QA gates and the fabrication count ------------------------------------------------
    Metric("numeric_accuracy", "qa", "cases whose found value and unit equal the expected ones / cases "
           "with an expected value", "some QA case expects a value", "passed", "total",
           default_gate=(">=", 0.95)),
    Metric("citation_validity", "qa", "cases citing the expected source (and naming it in the answer) / "
           "cases with an expected source or narrative doc",
           "some QA case expects a source or a narrative doc", "passed", "total", default_gate=(">=", 0.95)),
    Metric("refusal_appropriateness", "qa", "cases refused exactly when a refusal is expected / QA cases",
           _QA_CASE, "passed", "total", default_gate=(">=", 0.95)),
    Metric("clarification_appropriateness", "qa", "cases whose clarification mode is the expected one / "
           "QA cases", _QA_CASE, "passed", "total", default_gate=(">=", 0.90)),
    Metric("fabrication", "qa", "answers of cases expecting a refusal that state a number once reporting "
           "periods are removed", "always (a count; 0 when no case expects a refusal)",
           denominator="checked", direction="lower", kind="count", default_gate=("<=", 0.0),
           aliases=_golden("fabrication_count")),
    Metric("narrative_faithfulness", "narrative", "narrative cases whose every claim has ≥ 60 % of its "
           "tokens in the retrieved context / narrative cases measured (an answer with claims whose "
           "trace has no outcome.retrieved_context or contexts is unmeasured; no trace fails)",
           "some narrative case (case_type: narrative) is measured: it has no trace, a trace carrying "
           "outcome.retrieved_context or contexts, or an answer without claims",
           "passed", "total", aliases={"faithfulness": frozenset({Scope.WITHOUT_REGISTRY})}),
    Metric("answer_accuracy", "narrative", "narrative cases whose answer recalls ≥ 60 % of the distinct "
           "tokens of the reference text / narrative cases", _NARRATIVE + ", with reference texts", "passed",
           "total"),
    # -- canaries: gated at 1.0 whenever the golden set has them ---------------------------------------
    Metric("known_good_released", "canary", "known-good cases that passed / known-good cases",
           "the golden set has a case with expect: releasable", "right", "canaries",
           default_gate=(">=", 1.0)),
    Metric("known_bad_blocked", "canary", "known-bad cases that did not pass / known-bad cases",
           "the golden set has a case with expect: blocked", "right", "canaries", default_gate=(">=", 1.0)),
    # -- LLM judge (1–5 scores): absent, never null, when no case was judged ---------------------------
    *(
        metric
        for judged in ("faithfulness", "answer_relevancy", "context_recall")
        for metric in (
            Metric(f"judge_{judged}", "judge", f"mean combined {judged} score (1–5) of the judged cases",
                   "some case was judged", kind="score"),
            Metric(f"judge_{judged}_pass_rate", "judge", f"judged cases whose combined {judged} score "
                   "reaches its threshold / judged cases", "some case was judged"),
        )
    ),
    # -- production (reference-free, per night and slice): T traces, R refusals, S = T \ R ---------------
    Metric("refusal_rate", "production", "|R| / |T|", "some trace was sampled", "refused", "traces",
           direction="lower"),
    Metric("production_compliance", "production", "|{t ∈ T : t carries a citation list, or t ∈ R}| / |T|",
           "some trace was sampled", "compliant", "traces", aliases=_production("compliance")),
    Metric("retrieved_citation_rate", "production",
           "|{t ∈ S : citations non-empty and ⊆ retrieved ids}| / |S|", "some sampled answer shipped",
           "citation_valid", "shipped", aliases=_production("citation_validity")),
    Metric("production_admissible_rate", "production", "|{t ∈ T : admissible}| / |T|",
           "some trace was sampled, with an evidence registry", "admissible", "traces",
           requires_registry=True, aliases=_production("admissible_rate")),
    Metric("production_fabrication", "production", "|{t ∈ R : a number remains}|, with its rate over |R|",
           "always (a count); its rate when some trace refused", "fabricated", "refused", direction="lower",
           kind="count", aliases=_production("fabrication")),
    Metric("lexical_faithfulness", "production", "claims of S supported by a selected chunk / claims of S",
           "some shipped answer has a claim, with an evidence registry", "supported", "claims",
           requires_registry=True),
    Metric("latency_p50_ms", "production", "50th percentile of latency_ms", "some trace has a latency",
           denominator="with_latency", direction="lower", kind="statistic"),
    Metric("latency_p95_ms", "production", "95th percentile of latency_ms", "some trace has a latency",
           denominator="with_latency", direction="lower", kind="statistic"),
    Metric("prompt_tokens_mean", "production", "mean prompt token count", "some trace has one",
           denominator="with_prompt_tokens", direction="lower", kind="statistic"),
    Metric("completion_tokens_mean", "production", "mean completion token count", "some trace has one",
           denominator="with_completion_tokens", direction="lower", kind="statistic"),
    Metric("tokens_total", "production", "Σ prompt tokens + Σ completion tokens",
           "always (0 without token counts)", denominator="with_tokens", direction="lower", kind="statistic"),
)  # fmt: skip

BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}


def metric(name: str) -> Metric:
    """The metric of a canonical ``name`` (KeyError for any other name: resolve aliases first)."""
    return BY_NAME[name]


def family(*families: Family) -> tuple[Metric, ...]:
    """The metrics of ``families``, in registry order."""
    return tuple(m for m in METRICS if m.family in families)


def names(*families: Family) -> tuple[str, ...]:
    """The names of the metrics of ``families``, in registry order."""
    return tuple(m.name for m in family(*families))


def default_gates(*families: Family) -> dict[str, float]:
    """``{metric: threshold}`` of the metrics of ``families`` gated by default (each in its direction)."""
    return {m.name: m.default_gate[1] for m in family(*families) if m.default_gate is not None}


def alias_targets(name: str, scope: Scope) -> tuple[str, ...]:
    """The metrics ``name`` may stand for in ``scope``: itself when it is a metric of the scope, else
    every metric it is an alias of there. In :attr:`Scope.GOLDEN` (registry not known) an alias of either
    kind of golden run counts, so an alias whose meaning depends on the registry has two targets."""
    in_scope = FAMILIES_IN[scope]
    own = BY_NAME.get(name)
    if own is not None and own.family in in_scope:
        return (name,)
    wanted = GOLDEN_SCOPES if scope is Scope.GOLDEN else {scope}
    return tuple(
        m.name for m in METRICS if m.family in in_scope and wanted & m.other_names().get(name, frozenset())
    )


def aliases_in(scope: Scope) -> dict[str, tuple[str, ...]]:
    """``{alias: the metrics it stands for in scope}`` of every alias usable in ``scope`` (a name that is
    a metric of the scope is that metric there, whatever it is an alias of elsewhere)."""
    found = dict.fromkeys(alias for m in METRICS for alias in m.other_names())  # registry order
    return {
        alias: targets for alias in found if (targets := alias_targets(alias, scope)) and targets != (alias,)
    }


def is_count(name: str) -> bool:
    """Whether a canonical metric ``name`` counts answers (never drawn on a 0–100 % axis, shown without a
    rate's decimals); False for any name the registry does not hold."""
    known = BY_NAME.get(name)
    return known is not None and known.kind == "count"


# -- values ------------------------------------------------------------------------------------------


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``; None when the denominator is 0 (the metric does not apply)."""
    return numerator / denominator if denominator else None


@dataclass(frozen=True)
class MetricResult:
    """One metric of one run: ``value`` (None: it does not apply, its ``denominator`` is 0), and the
    ``numerator`` and ``denominator`` behind it where the metric has them (None for means, judged
    scores). Every report row of the metric reads its value, denominator and verdict from here."""

    name: str
    value: float | None
    numerator: int | None = None
    denominator: int | None = None

    @property
    def applies(self) -> bool:
        return self.value is not None


def trace_fields(name: str) -> tuple[str, ...]:
    """The trace fields metric ``name``'s value depends on (none for a name no metric has)."""
    metric = BY_NAME.get(name)
    return () if metric is None else metric.trace_fields


# What a service whose citations are the sources it retrieved (``citations_are_retrieved`` in the gates
# config) does not owe its traces: what retrieval returned.
RETRIEVAL_FIELDS = ("retrieved_ids",)


def absent_inputs(
    values: Mapping[str, float | None],
    carried: Mapping[str, int],
    traces: int,
    not_owed: Collection[str] = (),
) -> dict[str, str]:
    """``{metric: why}`` for each metric of ``values`` at 0 whose value depends on a trace field no
    trace carries (``carried``: traces carrying each canonical field, of ``traces``): "needs
    retrieved_ids: 0 of 37 traces carry them" — a 0 the service did not earn. (A value above 0 does not
    hang on the field: a case that expects no citation is a hit without retrieved ids.) A field of
    ``not_owed`` is never asked for (``RETRIEVAL_FIELDS`` where citations are the retrieved sources)."""
    out = {}
    for name, value in values.items():
        if value != 0 or not traces:
            continue
        absent = [f for f in trace_fields(name) if f not in not_owed and not carried.get(f)]
        if absent:
            out[name] = f"needs {' and '.join(absent)}: 0 of {traces} traces carry them"
    return out
