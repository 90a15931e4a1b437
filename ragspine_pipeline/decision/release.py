"""The release decision: ``ship`` or ``block``, and every reason for a block.

A release is blocked when any gate fails, any eligible slice falls below the slice gate (even when the
aggregate passes), or any baselined metric regressed. Gates are kept separate in the decision: each
failure is listed with its value, threshold and delta so an engineer knows what to repair first; the
``causes`` say where the failing cases stop in the pipeline.

:class:`ReleaseDecision` is one pydantic model for every place a decision travels: the ``release`` of
the JSON report, ``release_decision.json`` and the ``release_decision`` asset (the model itself, kept
as its JSON between steps), and whatever reads them back — the gate checks, the baseline step, the
alerts and the reports take the model; what was written as JSON is read with
``ReleaseDecision.model_validate``.
The decision's own fields come from :func:`decide`; a shell adds the run's figures (``gates``,
``metrics``, ``warnings``; ``baseline_figures`` in the asset only) with :meth:`with_run_figures`. A
metric that does not apply to the run has the value ``null``; ``not_applicable`` lists those metrics,
derived from the values.

``detectable_drop`` states what the golden set can detect: the smallest drop of the pass rate the
baseline test in use (strict, or paired with its alpha and margin) catches with 80 % power on the run's
number of cases (``decision.detectable``), or why it is not stated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, computed_field, model_serializer

from ragspine_pipeline.decision.detectable import comparison_detectable_drop
from ragspine_pipeline.decision.gates import Gate, GateResult
from ragspine_pipeline.decision.release_rows import (
    MODEL_CONFIG,
    BaselineRegression,
    FailedGate,
    FailedSlice,
    GateRow,
    UnmeasuredGate,
)

if TYPE_CHECKING:  # types only: the alerts read decisions without loading the scoring stack
    from ragspine_pipeline.decision.baseline import Comparison
    from ragspine_pipeline.decision.config import SliceGate
    from ragspine_pipeline.decision.paired import PairedSettings
    from ragspine_pipeline.scoring.slices import Slice

# The regression the paired baseline test reports (``decision.evaluation.compare_with_baseline``).
PAIRED_REGRESSION = "case_pass_rate (paired)"
RUN_FIGURES = frozenset(
    {"gates", "metrics", "not_applicable", "warnings", "baseline_figures", "service_release"}
)
"""What a shell adds to a decision (:meth:`ReleaseDecision.with_run_figures`): not in the report's
``release``, which sits beside the report's own gates and figures."""


class ReleaseDecision(BaseModel):
    model_config = MODEL_CONFIG

    failed_gates: list[FailedGate] = Field(default_factory=list)
    failed_slices: list[FailedSlice] = Field(default_factory=list)
    regressions: list[BaselineRegression] = Field(default_factory=list)
    first_failed_stage_histogram: dict[str, int] | None = None
    index_version: str | None = None
    index_versions: list[str] = Field(default_factory=list)
    golden_version: str | None = None
    golden_sha256: str | None = None
    run_id: str
    unmeasured_baseline_metrics: list[str] = Field(default_factory=list)
    warned_gates: list[FailedGate] = Field(default_factory=list)  # failed soft gates: never block
    slice_gate: dict[str, Any] | None = None  # {min_rate, min_n} the slices were judged by (None: no slices)
    unmeasured_gates: list[UnmeasuredGate] = Field(default_factory=list)
    # Where the failing cases stop and the worst of them (``decision.causes.release_causes``).
    causes: dict[str, Any] | None = None
    # Why the traces cannot stand for one index ({reason: "mixed_index_versions", detail, ...}): blocks.
    integrity: list[dict[str, Any]] = Field(default_factory=list)
    # The paired baseline test (``decision.paired``) when the config asks for it: flips, p-values.
    paired: dict[str, Any] | None = None
    # What the golden set can detect with the baseline test in use (``decision.detectable``): {cases,
    # power, drop, test, …, line}, or {reason} when it is not stated (no baseline comparison, no cases).
    detectable_drop: dict[str, Any] | None = None
    # -- the run's figures, added by the shell that stores the decision (RUN_FIGURES) ---------------------
    gates: list[GateRow] | None = None  # every gate of the run
    metrics: dict[str, float | None] | None = None  # every metric, rounded; null: does not apply
    warnings: list[str] | None = None
    baseline_figures: dict[str, Any] | None = None  # what the baseline step ratchets with (asset only)
    # The release of the service the run evaluated (its SUT settings' release), when known: a run of the
    # paired pool's founding release joins the pool whatever the paired test said (``decision.paired``).
    service_release: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def not_applicable(self) -> list[str] | None:
        """The metrics whose value is null (their denominator is 0): derived, never kept apart."""
        if self.metrics is None:
            return None
        return [name for name, value in self.metrics.items() if value is None]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def decision(self) -> Literal["ship", "block"]:
        """``block`` when anything blocks (:meth:`blocks`), else ``ship``: derived here, the one place,
        never stored apart from its reasons (a stored decision's own ``decision`` is read back from
        them)."""
        return "block" if self.blocks() else "ship"

    @model_serializer(mode="wrap")
    def _decision_first(self, serialize) -> Any:
        """The decision leads what a reader sees (``release_decision.json``, the report's ``release``)."""
        data = serialize(self)
        if isinstance(data, dict) and "decision" in data:
            return {"decision": data.pop("decision"), **data}
        return data

    @property
    def ships(self) -> bool:
        return self.decision == "ship"

    def with_comparison(
        self,
        comparison: Comparison | None,
        *,
        baseline_test: Literal["strict", "paired"] | None = None,
        paired_settings: PairedSettings | None = None,
        cases: int | None = None,
    ) -> ReleaseDecision:
        """The same decision judged against another baseline comparison (the one read under the
        baseline's lock): regressions and unmeasured baseline metrics replaced, ship/block redone, and
        what the golden set can detect restated (``detectable.comparison_detectable_drop``; ``baseline_test``,
        ``paired_settings`` and ``cases`` are the config's test and the run's golden cases when known)."""
        if cases is None and isinstance(self.causes, Mapping):
            cases = self.causes.get("cases")
        decided = self.model_copy(
            update={
                "regressions": [] if comparison is None else _regressions(comparison),
                "unmeasured_baseline_metrics": [] if comparison is None else list(comparison.unmeasured),
                "paired": None if comparison is None else comparison.paired,
                "detectable_drop": comparison_detectable_drop(
                    comparison, cases, baseline_test=baseline_test, paired_settings=paired_settings
                ),
            }
        )
        return decided

    def with_run_figures(
        self,
        gates: Sequence[GateRow],
        metrics: Mapping[str, float | None],
        warnings: Sequence[str],
        baseline_figures: Mapping[str, Any] | None = None,
        service_release: str | None = None,
    ) -> ReleaseDecision:
        """The decision with the run's gate rows, metric values and warnings: what
        ``release_decision.json`` holds (and, with ``baseline_figures``, the asset)."""
        return self.model_copy(
            update={
                "gates": list(gates),
                "metrics": dict(metrics),
                "warnings": list(warnings),
                "baseline_figures": None if baseline_figures is None else dict(baseline_figures),
                "service_release": service_release,
            }
        )

    def blocked_by_paired_test_alone(self) -> bool:
        """Blocked, and it would ship but for the paired baseline test (no gate, slice or index problem):
        a run of the paired pool's founding release still joins the pool (``decision.paired``)."""
        others = [r for r in self.regressions if r.metric != PAIRED_REGRESSION]
        unblocked = self.model_copy(update={"regressions": others})
        return len(others) < len(self.regressions) and not unblocked.blocks()

    def blocks(self) -> bool:
        """Any failed hard gate (an unmeasured one included), failed slice, regression or index problem."""
        return bool(
            self.failed_gates
            or self.failed_slices
            or self.regressions
            or any(gate.severity == "hard" for gate in self.unmeasured_gates)
            or self.integrity
        )

    def reasons(self) -> list[str]:
        """One line for each reason of a block, then each soft gate that failed (they never block), as
        a person reads them: ``failed gate  precision = 0.8000, needs >= 0.95``."""
        lines = [f"blocked      {problem['reason']}: {problem['detail']}" for problem in self.integrity]
        lines += [
            f"failed gate  {g.metric} = {g.value:.4f}, needs {g.op} {g.threshold}" for g in self.failed_gates
        ]
        for gate in self.unmeasured_gates:
            why = f": {gate.reason}" if gate.reason else ""
            lines.append(
                f"unmeasured   {gate.metric} ({gate.severity}), needs {gate.op} {gate.threshold}{why}"
            )
        lines += [
            f"failed slice {s.dimension}={s.value}: releasable {s.releasable_rate:.3f} of {s.n}, "
            f"needs >= {s.min_rate}"
            for s in self.failed_slices
        ]
        lines += [
            f"regression   {r.metric}: {r.current:.4f}, worse than baseline {r.baseline:.4f}"
            for r in self.regressions
        ]
        lines += [
            f"soft gate    {g.metric} = {g.value:.4f}, wants {g.op} {g.threshold}" for g in self.warned_gates
        ]
        return lines

    def verdict(self) -> str:
        """The decision in one line: ``ship``, or ``block`` with its first reason (and how many more)."""
        if self.ships:
            return "ship"
        reasons = [line for line in self.reasons() if not line.startswith("soft gate")]
        first = " ".join(reasons[0].split()) if reasons else "blocked"
        more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
        return f"block: {first}{more}"

    def as_dict(self) -> dict:
        """The decision alone, as JSON data (the report's ``release``)."""
        return self.model_dump(mode="json", by_alias=True, exclude=set(RUN_FIGURES))

    def record(self) -> dict:
        """``release_decision.json``: the asset value without the baseline step's working figures."""
        return self.model_dump(mode="json", by_alias=True, exclude={"baseline_figures"})


def _regressions(comparison: Comparison) -> list[BaselineRegression]:
    return [BaselineRegression(**asdict(r)) for r in comparison.regressions]


def failed_slices(all_slices: list[Slice], gate: SliceGate) -> list[FailedSlice]:
    """Slices with at least ``min_n`` cases whose releasable rate is below ``min_rate``, worst first."""
    from ragspine_pipeline.scoring.slices import worst_first  # the scoring stack, only where slices are

    failing = worst_first([s for s in all_slices if s.n >= gate.min_n and s.releasable_rate < gate.min_rate])
    return [
        FailedSlice(
            dimension=s.dimension,
            value=s.value,
            n=s.n,
            releasable_rate=s.releasable_rate,
            ci95=(s.ci_low, s.ci_high),
            min_rate=gate.min_rate,
        )
        for s in failing
    ]


def decide(
    gates: list[GateResult],
    slices_below: list[FailedSlice],
    comparison: Comparison | None,
    *,
    histogram: dict[str, int] | None,
    index_versions: dict[str, int],
    golden_version: str | None,
    golden_sha256: str | None,
    run_id: str,
    slice_gate: SliceGate | None = None,
    unmeasured: Sequence[Gate] = (),
    causes: dict | None = None,
    expected_index_version: str | None = None,
    unmeasured_reasons: Mapping[str, str] | None = None,
) -> ReleaseDecision:
    """Block on any failed hard gate (an unmeasured one included), failed slice, regression, or traces
    that do not stand for one index (:func:`index_integrity`); otherwise ship.

    Failed soft gates are listed in ``warned_gates`` and do not block. ``index_versions`` counts the
    traces per index version; the most common one is the run's. ``causes`` (``decision.causes``) is
    stored as given: it explains the decision, it never changes it. ``unmeasured_reasons``:
    ``{metric: why}`` of unmeasured gates whose reason the run knows, kept on each.
    """
    failing = [
        FailedGate(metric=r.gate.metric, value=r.value, op=r.gate.op, threshold=r.gate.threshold,
                   severity=r.gate.severity)
        for r in gates
        if r.passed is False
    ]  # fmt: skip
    failed = [f for f in failing if f.severity == "hard"]
    regressions = [] if comparison is None else _regressions(comparison)
    seen = Counter(index_versions)
    decision = ReleaseDecision(
        failed_gates=failed,
        failed_slices=slices_below,
        regressions=regressions,
        first_failed_stage_histogram=histogram,
        # The most traces, then the smallest version string: a tie never depends on the traces' order.
        index_version=min(seen, key=lambda version: (-seen[version], version)) if seen else None,
        index_versions=sorted(seen),
        golden_version=golden_version,
        golden_sha256=golden_sha256,
        run_id=run_id,
        unmeasured_baseline_metrics=[] if comparison is None else list(comparison.unmeasured),
        warned_gates=[f for f in failing if f.severity != "hard"],
        slice_gate=None if slice_gate is None else slice_gate.model_dump(),
        unmeasured_gates=[
            UnmeasuredGate(
                metric=g.metric,
                op=g.op,
                threshold=g.threshold,
                severity=g.severity,
                reason=(unmeasured_reasons or {}).get(g.metric),
            )
            for g in unmeasured
        ],
        causes=causes,
        integrity=index_integrity(seen, expected_index_version),
        detectable_drop=comparison_detectable_drop(
            comparison, causes.get("cases") if isinstance(causes, Mapping) else None
        ),
    )
    return decision


def index_integrity(
    index_versions: Mapping[str, int],
    expected: str | None = None,
    *,
    replays: Sequence[tuple[str, Mapping[str, int]]] = (),
) -> list[dict]:
    """Why a replay's traces cannot stand for one index, as ``mixed_index_versions`` problems: they name
    more than one index version, or one other than the version the run was requested for (a replay
    against an index that changed under it, or a load balancer across two builds). Traces that name no
    index version at all cannot be checked and pass.

    ``replays``: every replay of the run (``(its file, its traces per index version)``); when given,
    the check runs over all of them together (``index_versions`` is then ignored) — two replays that
    each name one index, but not the same one, are mixed too — and the detail says which replay names
    which index."""
    if replays:
        total: Counter[str] = Counter()
        for _name, versions in replays:
            total.update({version: int(n) for version, n in versions.items()})
        index_versions = total
    counts = {version: int(n) for version, n in sorted(index_versions.items())}
    by_replay = (
        "; ".join(
            f"{name}: {', '.join(sorted(versions)) or 'no index version'}" for name, versions in replays
        )
        if len(replays) > 1
        else ""
    )
    if len(counts) > 1:
        named = ", ".join(f"{version} ({n} traces)" for version, n in counts.items())
        detail = f"traces name {named}" + (f" (replays: {by_replay})" if by_replay else "")
        return [{"reason": "mixed_index_versions", "index_versions": counts, "detail": detail}]
    if expected is not None and counts and expected not in counts:
        (version,) = counts
        detail = f"the run was requested for index {expected}, its traces name {version}"
        return [
            {
                "reason": "mixed_index_versions",
                "index_versions": counts,
                "expected": expected,
                "detail": detail,
            }
        ]
    return []
