"""The release decision: ``ship`` or ``block``, and every reason for a block.

A release is blocked when any gate fails, any eligible slice falls below the slice gate (even when the
aggregate passes), or any baselined metric regressed. Gates are kept separate in the decision: each
failure is listed with its value, threshold and delta so an engineer knows what to repair first; the
``causes`` say where the failing cases stop in the pipeline.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from ragspine_pipeline.decision.baseline import Comparison
from ragspine_pipeline.decision.config import SliceGate
from ragspine_pipeline.decision.gates import Gate, GateResult
from ragspine_pipeline.scoring.slices import Slice, worst_first


@dataclass(frozen=True)
class FailedGate:
    metric: str
    value: float
    op: str
    threshold: float
    delta: float  # value - threshold
    severity: str = "hard"


@dataclass(frozen=True)
class FailedSlice:
    dimension: str
    value: str
    n: int
    releasable_rate: float
    ci95: tuple[float, float]
    min_rate: float


@dataclass(frozen=True)
class ReleaseDecision:
    decision: str  # "ship" or "block"
    failed_gates: list[FailedGate]
    failed_slices: list[FailedSlice]
    regressions: list[dict]
    first_failed_stage_histogram: dict[str, int] | None
    index_version: str | None
    index_versions: list[str]
    golden_version: str | None
    golden_sha256: str | None
    run_id: str
    unmeasured_baseline_metrics: list[str] = field(default_factory=list)
    warned_gates: list[FailedGate] = field(default_factory=list)  # failed soft gates: never block
    slice_gate: dict | None = None  # {min_rate, min_n} the slices were judged by (None: no slices)
    # Gates whose metric was not measured ({metric, op, threshold, severity}): a hard one blocks.
    unmeasured_gates: list[dict] = field(default_factory=list)
    # Where the failing cases stop and the worst of them (``decision.causes.release_causes``).
    causes: dict | None = None
    # Why the traces cannot stand for one index ({reason: "mixed_index_versions", detail, ...}): blocks.
    integrity: list[dict] = field(default_factory=list)
    # The paired baseline test (``decision.paired``) when the config asks for it: flips, p-values.
    paired: dict | None = None

    @property
    def ships(self) -> bool:
        return self.decision == "ship"

    def with_comparison(self, comparison: Comparison | None) -> ReleaseDecision:
        """The same decision judged against another baseline comparison (the one read under the
        baseline's lock): regressions and unmeasured baseline metrics replaced, ship/block redone."""
        regressions = [] if comparison is None else [asdict(r) for r in comparison.regressions]
        decided = replace(
            self,
            regressions=regressions,
            unmeasured_baseline_metrics=[] if comparison is None else list(comparison.unmeasured),
            paired=None if comparison is None else comparison.paired,
        )
        return replace(decided, decision="block" if decided.blocks() else "ship")

    def blocks(self) -> bool:
        """Any failed hard gate (an unmeasured one included), failed slice, regression or index problem."""
        return bool(
            self.failed_gates
            or self.failed_slices
            or self.regressions
            or any(gate["severity"] == "hard" for gate in self.unmeasured_gates)
            or self.integrity
        )

    def as_dict(self) -> dict:
        return asdict(self)


def failed_slices(all_slices: list[Slice], gate: SliceGate) -> list[FailedSlice]:
    """Slices with at least ``min_n`` cases whose releasable rate is below ``min_rate``, worst first."""
    failing = worst_first([s for s in all_slices if s.n >= gate.min_n and s.releasable_rate < gate.min_rate])
    return [
        FailedSlice(s.dimension, s.value, s.n, s.releasable_rate, (s.ci_low, s.ci_high), gate.min_rate)
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
) -> ReleaseDecision:
    """Block on any failed hard gate (an unmeasured one included), failed slice, regression, or traces
    that do not stand for one index (:func:`index_integrity`); otherwise ship.

    Failed soft gates are listed in ``warned_gates`` and do not block. ``index_versions`` counts the
    traces per index version; the most common one is the run's. ``causes`` (``decision.causes``) is
    stored as given: it explains the decision, it never changes it.
    """
    failing = [
        FailedGate(r.gate.metric, r.value, r.gate.op, r.gate.threshold, r.value - r.gate.threshold,
                   r.gate.severity)
        for r in gates
        if not r.passed
    ]  # fmt: skip
    failed = [f for f in failing if f.severity == "hard"]
    regressions = [] if comparison is None else [asdict(r) for r in comparison.regressions]
    seen = Counter(index_versions)
    decision = ReleaseDecision(
        decision="ship",
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
            {"metric": g.metric, "op": g.op, "threshold": g.threshold, "severity": g.severity}
            for g in unmeasured
        ],
        causes=causes,
        integrity=index_integrity(seen, expected_index_version),
    )
    return replace(decision, decision="block" if decision.blocks() else "ship")


def index_integrity(index_versions: Mapping[str, int], expected: str | None = None) -> list[dict]:
    """Why a replay's traces cannot stand for one index, as ``mixed_index_versions`` problems: they name
    more than one index version, or one other than the version the run was requested for (a replay
    against an index that changed under it, or a load balancer across two builds). Traces that name no
    index version at all cannot be checked and pass."""
    counts = {version: int(n) for version, n in sorted(index_versions.items())}
    if len(counts) > 1:
        named = ", ".join(f"{version} ({n} traces)" for version, n in counts.items())
        return [
            {"reason": "mixed_index_versions", "index_versions": counts, "detail": f"traces name {named}"}
        ]
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
