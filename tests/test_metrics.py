"""The metric registry: one name per metric across every family, aliases that never shadow a metric, and
every metric list of the pipeline derived from it."""

from __future__ import annotations

from collections import Counter

import pytest

from ragspine_pipeline import metrics as registry
from ragspine_pipeline.decision.baseline import COUNT_METRICS
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
from ragspine_pipeline.decision.gates import (
    DEFAULT_GATES,
    DEFAULT_QA_GATES,
    LOWER_IS_BETTER,
    SHORT_NAMES,
    GateSpecError,
    canonical_metric,
)
from ragspine_pipeline.judge.prompts import JUDGED_METRICS
from ragspine_pipeline.judge.prompts import METRICS as JUDGE_PROMPTS
from ragspine_pipeline.metrics import METRICS, Scope
from ragspine_pipeline.scoring.drop_settings import WORSE_WHEN
from ragspine_pipeline.scoring.grounded import METRICS as GROUNDED
from ragspine_pipeline.scoring.layered import RATIO_DENOMINATORS
from ragspine_pipeline.scoring.production import METRIC_NAMES as PRODUCTION
from ragspine_pipeline.scoring.qa_gates import GATES as QA_GATES

NAMES = [m.name for m in METRICS]
ALIASES = {alias for m in METRICS for alias in m.other_names()}


def test_every_metric_name_appears_in_exactly_one_family():
    repeated = {name: n for name, n in Counter(NAMES).items() if n > 1}
    assert repeated == {}
    families = {name: {m.family for m in METRICS if m.name == name} for name in NAMES}
    assert all(len(found) == 1 for found in families.values())
    # The names that once meant several metrics are none of them now.
    assert not {"faithfulness"} & set(NAMES)
    assert {"claim_faithfulness", "narrative_faithfulness", "lexical_faithfulness"} <= set(NAMES)
    assert registry.metric("citation_validity").family == "qa"
    assert registry.metric("retrieved_citation_rate").family == "production"


@pytest.mark.parametrize("scope", list(Scope))
def test_no_alias_equals_the_name_of_another_metric_where_it_is_read(scope):
    """An alias stands for its metrics only in its scopes, so it never shadows a metric there: in the
    scope it applies in, no metric of that scope bears its name. (A production summary's
    ``compliance``, written before the rename, is ``production_compliance`` there; in a golden run the
    name is the grounded metric's own.)"""
    in_scope = set(registry.names(*registry.FAMILIES_IN[scope]))
    for alias, targets in registry.aliases_in(scope).items():
        assert alias not in in_scope, (scope, alias)
        assert set(targets) <= in_scope, (scope, alias)
        if scope is not Scope.GOLDEN:  # where the registry is known, every alias means one metric
            assert len(targets) == 1, (scope, alias, targets)


def test_no_alias_is_a_metric_name_in_every_scope_it_is_declared_for():
    for m in METRICS:
        for alias, scopes in m.other_names().items():
            assert alias != m.name
            for scope in scopes:
                assert alias not in registry.names(*registry.FAMILIES_IN[scope]), (m.name, alias, scope)
            assert m.family in {f for scope in scopes for f in registry.FAMILIES_IN[scope]}, (m.name, alias)


def test_every_name_resolves_to_exactly_one_metric_in_each_known_scope():
    for scope in (Scope.WITH_REGISTRY, Scope.WITHOUT_REGISTRY, Scope.PRODUCTION):
        for name in [*registry.names(*registry.FAMILIES_IN[scope]), *registry.aliases_in(scope)]:
            assert len(registry.alias_targets(name, scope)) == 1, (scope, name)


OLD_NAMES = [
    # (old name, scope it is read in, metric)
    ("faithfulness", Scope.WITH_REGISTRY, "claim_faithfulness"),
    ("faithfulness", Scope.WITHOUT_REGISTRY, "narrative_faithfulness"),
    ("fabrication_count", Scope.GOLDEN, "fabrication"),
    ("compliance", Scope.PRODUCTION, "production_compliance"),
    ("citation_validity", Scope.PRODUCTION, "retrieved_citation_rate"),
    ("admissible_rate", Scope.PRODUCTION, "production_admissible_rate"),
    ("fabrication", Scope.PRODUCTION, "production_fabrication"),
    ("under", Scope.GOLDEN, "under_refusal"),
    ("recall@10", Scope.WITHOUT_REGISTRY, "recall@k"),
    # … and a current name is itself where its family is read.
    ("compliance", Scope.GOLDEN, "compliance"),
    ("citation_validity", Scope.WITHOUT_REGISTRY, "citation_validity"),
    ("fabrication", Scope.WITH_REGISTRY, "fabrication"),
]


@pytest.mark.parametrize(("name", "scope", "metric"), OLD_NAMES)
def test_old_names_resolve_through_the_one_resolver(name, scope, metric):
    assert (
        canonical_metric(name, KNOWN_METRICS if scope is not Scope.PRODUCTION else PRODUCTION, scope)
        == metric
    )


def test_an_old_name_whose_metric_depends_on_the_registry_is_an_error_naming_both_where_it_is_not_known():
    with pytest.raises(GateSpecError) as caught:
        canonical_metric("faithfulness", KNOWN_METRICS)
    assert str(caught.value) == (
        "'faithfulness' is ambiguous: it means claim_faithfulness (in a golden run with an evidence "
        "registry) or narrative_faithfulness (in a golden run without an evidence registry); write the one "
        "you mean"
    )


def test_every_metric_list_of_the_pipeline_is_the_registry_s():
    assert registry.names(*registry.GOLDEN_FAMILIES) == KNOWN_METRICS
    assert tuple(GROUNDED) == registry.names("grounded")
    assert {m.name: m.case_denominator for m in METRICS if m.case_denominator} == {**RATIO_DENOMINATORS}
    assert (
        *(n for n in registry.names("qa") if n != "fabrication"),
        *registry.names("narrative"),
    ) == QA_GATES
    assert registry.names("production") == PRODUCTION
    assert tuple(n for m in JUDGE_PROMPTS for n in (f"judge_{m}", f"judge_{m}_pass_rate")) == JUDGED_METRICS
    assert set(WORSE_WHEN) == {m.name for m in registry.family("production") if m.kind in ("rate", "count")}
    assert DEFAULT_GATES == {"precision": 0.80, "chr": 0.75, "under_refusal": 0.05, "over_refusal": 0.10,
                             "compliance": 0.98}  # fmt: skip
    assert set(DEFAULT_QA_GATES) == {*registry.names("qa")}
    assert {"under_refusal", "over_refusal", "fabrication"} == LOWER_IS_BETTER
    assert SHORT_NAMES == {"under": "under_refusal", "over": "over_refusal", "recall": "recall@k"}
    assert {"fabrication", "fabrication_count"} == COUNT_METRICS


def test_each_default_gate_s_direction_is_its_metric_s():
    for m in METRICS:
        if m.default_gate is not None:
            op, _ = m.default_gate
            assert op == ("<=" if m.lower_is_better else ">="), m.name


def test_every_metric_states_its_formula_and_when_it_applies():
    for m in METRICS:
        assert m.formula.strip() and m.applies.strip(), m.name
        assert m.kind in ("rate", "count", "score", "statistic")
        if m.kind == "count":
            assert m.denominator is not None  # a count is reported with what it counted among


def test_ratio_is_null_never_a_placeholder_when_the_denominator_is_empty():
    assert registry.ratio(0, 0) is None
    assert registry.ratio(3, 4) == 0.75
    assert not registry.MetricResult("precision", None, 0, 0).applies
