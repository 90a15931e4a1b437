"""The release decision's gates as asset checks, and the baseline ratchet.

A blocked release is a successful evaluation: ``release_decision`` (the model, from ``defs.evaluation``) is
always stored and the run succeeds, tagged ``ragspine/decision=ship|block``; a run fails only when no
evaluation could be made, so on-call can tell "the release is bad" (a red check, a ``block`` tag) from
"the pipeline broke" (a failed run). ``release_gates`` reports one check per gate of the committed config
(ERROR for hard gates, WARN for soft ones), one for the slice gate, one for baseline regressions, one for
the index the traces name, and ``release_ships`` (the verdict itself: green for ``ship``, red for
``block``). The checks do not block the run; ``baseline`` reads the decision and promotes only from
``ship``.
"""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from ragspine_pipeline.decision import baseline as baselines
from ragspine_pipeline.decision.causes import cause_sentence
from ragspine_pipeline.decision.config import EvalConfig, load_config
from ragspine_pipeline.decision.evaluation import (
    KNOWN_METRICS,
    BaselineFigures,
    Evaluation,
    compare_with_baseline,
)
from ragspine_pipeline.decision.gates import Gate, default_gates
from ragspine_pipeline.decision.promotion import ratchet_entry
from ragspine_pipeline.decision.release import PAIRED_REGRESSION, ReleaseDecision
from ragspine_pipeline.decision.release_rows import FailedSlice, GateRow
from ragspine_pipeline.defs.golden import GROUP
from ragspine_pipeline.defs.io import IO_MANAGER_KEY
from ragspine_pipeline.defs.judge import EVALUATION_POOL
from ragspine_pipeline.defs.metadata import markdown_table, user_errors
from ragspine_pipeline.defs.resources import METRIC_SCOPE
from ragspine_pipeline.defs.retries import step_retries
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.reports.markdown import md_text
from ragspine_pipeline.sources.versioned import open_versioned, s3_endpoint

ASSET_KEY = dg.AssetKey("release_decision")  # the unnamed service's
# The run's verdict, for automation that waits on runs: a blocked release is a successful run.
DECISION_TAG = "ragspine/decision"
NO_DECISION = "none: the run failed"  # the tag of a run that decided, then failed (defs.alerts)
SHIPS_CHECK = "release_ships"
SLICE_CHECK = "slice_gate"
BASELINE_CHECK = "no_regression_vs_baseline"
INDEX_CHECK = "single_index_version"


def check_name(metric: str) -> str:
    """A Dagster-safe check name for a gate: ``recall@k`` → ``gate_recall_at_k``."""
    return "gate_" + metric.replace("@", "_at_").replace("-", "_")


def committed_gates(path: Path) -> tuple[EvalConfig, list[Gate]]:
    """The gates config every check is built from (read once, when the definitions load).

    A config without ``gates`` gets a check for every default gate of every dialect: which of them a
    run applies depends on its data and baseline (``decision.run_gates.run_gates``); the others report
    "not gated" for that run.
    """
    config = load_config(path, KNOWN_METRICS, METRIC_SCOPE)
    return config, config.gate_list(KNOWN_METRICS, METRIC_SCOPE) or default_gates(grounded=True, qa=True)


def decision_value(
    evaluation: Evaluation, report: dict, config: EvalConfig, service_release: str | None = None
) -> ReleaseDecision:
    """The ``release_decision`` of a run: the decision (as the report rounds it) with the gates, metrics
    and warnings of the run — what ``release_decision.json`` holds (:meth:`ReleaseDecision.record`) —
    and ``baseline_figures``, what the baseline step needs to compare and ratchet under the baseline's
    lock (``decision.evaluation.BaselineFigures``), with the release of the service it evaluated: the
    asset's value, kept as its JSON between steps."""
    figures = evaluation.baseline_figures(paired=config.baseline_test == "paired")
    metrics = {name: None if v is None else round(v, 4) for name, v in evaluation.metrics.items()}
    release = ReleaseDecision.model_validate(report["release"]).with_run_figures(
        [GateRow.model_validate(row) for row in report["gates"]],
        metrics,
        report["warnings"],
        figures.to_dict(),
        service_release,
    )
    return release


def decision_metadata(decision: ReleaseDecision, decision_uri: str) -> dict:
    """What the UI shows of a decision: the verdict, its cause, and a table of every reason."""
    failed = [
        (g.metric, f"{g.value:.4f}", f"{g.op} {g.threshold}", f"{g.delta:+.4f}", g.severity)
        for g in [*decision.failed_gates, *decision.warned_gates]
    ]
    failed += [
        (g.metric, "not measured", f"{g.op} {g.threshold}", "", g.severity) for g in decision.unmeasured_gates
    ]
    regressions = [
        (r.metric, f"{r.current:.4f}", f"{r.baseline:.4f}", f"{r.current - r.baseline:+.4f}")
        for r in decision.regressions
    ]
    reasons = [
        markdown_table(header, rows)
        for header, rows in (
            (["gate", "value", "needs", "delta", "severity"], failed),
            (["baselined metric", "value", "baseline", "delta"], regressions),
        )
        if rows
    ]
    if decision.failed_slices:
        reasons.append(failed_slices_table(decision.failed_slices))
    reasons += [f"Integrity: {md_text(problem['detail'])}" for problem in decision.integrity]
    why = cause_sentence(decision.causes) if not decision.ships else None
    return {
        "decision": decision.decision,
        **({"why": why} if why else {}),
        "index_version": decision.index_version or "unknown",
        "golden_version": decision.golden_version or "unfrozen",
        "failed_gates": len(decision.failed_gates),
        "warned_gates": len(decision.warned_gates),
        "failed_slices": len(decision.failed_slices),
        "regressions": len(decision.regressions),
        "not_applicable_gates": ", ".join(g.metric for g in decision.gates or () if not g.applicable)
        or "none",
        "reasons": dg.MetadataValue.md(
            "\n\n".join(reasons) or "None: every gate, slice and baselined metric holds."
        ),
        "decision_path": dg.MetadataValue.path(decision_uri),
    }


def failed_slices_table(failed_slices: list[FailedSlice]) -> str:
    """The slices that failed the slice gate, worst first: n, releasable rate, its 95 % interval and
    the rate they needed (Markdown)."""
    rows = [
        (
            f"{s.dimension}={s.value}",
            s.n,
            f"{s.releasable_rate:.3f}",
            "n/a" if s.ci95 is None else f"{s.ci95[0]:.3f}–{s.ci95[1]:.3f}",
            f"≥ {s.min_rate}",
        )
        for s in failed_slices
    ]
    return markdown_table(["slice", "n", "releasable", "95% CI", "needs"], rows)


def release_gates_check(
    config_path: Path | None = None,
    *,
    asset: dg.AssetKey = ASSET_KEY,
    name: str = "release_gates",
    pool: str | None = None,
) -> dg.AssetChecksDefinition:
    """One check per committed gate, plus the slice gate, the baseline, the index and the verdict, in one
    step, on the `release_decision` asset ``asset``, in the concurrency pool ``pool``. None of them blocks:
    a failed ERROR check is a red mark on a successful run, and the decision it reports is already stored
    and announced."""
    _config, gates = committed_gates(config_path)
    check_names = [check_name(g.metric) for g in gates]
    specs = [
        dg.AssetCheckSpec(
            check_name(g.metric),
            asset=asset,
            description=f"{g.severity} gate: {g.metric} {g.op} {g.threshold}",
        )
        for g in gates
    ]
    specs += [
        dg.AssetCheckSpec(
            SHIPS_CHECK, asset=asset, description="the release decision is ship (red when it blocks)"
        ),
        dg.AssetCheckSpec(
            SLICE_CHECK,
            asset=asset,
            description="every slice with enough cases meets the slice gate",
        ),
        dg.AssetCheckSpec(
            BASELINE_CHECK,
            asset=asset,
            description="no baselined metric is worse than its baseline (equal passes)",
        ),
        dg.AssetCheckSpec(
            INDEX_CHECK,
            asset=asset,
            description="the replay's traces name one index version, the one the run was requested for",
        ),
    ]

    @dg.multi_asset_check(
        specs=specs,
        name=name,
        ins={"release_decision": dg.AssetIn(asset)},
        pool=pool,
        retry_policy=step_retries(),
    )
    def release_gates(release_decision: ReleaseDecision) -> Iterator[dg.AssetCheckResult]:
        decision = release_decision
        why = None if decision.ships else cause_sentence(decision.causes)
        yield dg.AssetCheckResult(
            check_name=SHIPS_CHECK,
            asset_key=asset,
            passed=decision.ships,
            severity=dg.AssetCheckSeverity.ERROR,
            description=why,
            metadata={"decision": decision.decision, **({"why": why} if why else {})},
        )
        checked = set()
        for gate in decision.gates or ():
            checked.add(check_name(gate.metric))
            yield _gate_check(gate, asset)
        for unmeasured in decision.unmeasured_gates:  # e.g. a judged metric when the judge failed
            checked.add(check_name(unmeasured.metric))
            yield dg.AssetCheckResult(
                check_name=check_name(unmeasured.metric),
                asset_key=asset,
                passed=False,
                severity=_severity(unmeasured.severity),
                description=f"not measured: {unmeasured.reason}" if unmeasured.reason else "not measured",
                metadata={"value": "not measured", "threshold": unmeasured.threshold, "op": unmeasured.op},
            )
        for name in check_names:  # a default gate of another dialect than this run's data
            if name not in checked:
                yield dg.AssetCheckResult(
                    check_name=name, asset_key=asset, passed=True, metadata={"value": "not gated"}
                )
        failed_slices = decision.failed_slices
        gate = decision.slice_gate
        yield dg.AssetCheckResult(
            check_name=SLICE_CHECK,
            asset_key=asset,
            passed=not failed_slices,
            metadata={
                "gate": "not applied: the slice gate needs an evidence registry (the report shows the "
                "cases by tag, not gated)"
                if gate is None
                else f"releasable rate ≥ {gate['min_rate']} in every slice of at least {gate['min_n']} cases",
                "failed": len(failed_slices),
                "failed_slices": dg.MetadataValue.md(
                    failed_slices_table(failed_slices) if failed_slices else "None."
                ),
            },
        )
        yield dg.AssetCheckResult(
            check_name=BASELINE_CHECK,
            asset_key=asset,
            passed=not decision.regressions,
            metadata={
                "regressions": dg.MetadataValue.json(
                    [r.model_dump(mode="json") for r in decision.regressions]
                )
            },
        )
        integrity = decision.integrity
        yield dg.AssetCheckResult(
            check_name=INDEX_CHECK,
            asset_key=asset,
            passed=not integrity,
            description="; ".join(problem["detail"] for problem in integrity) or None,
            metadata={"index_versions": dg.MetadataValue.json(decision.index_versions)},
        )

    return release_gates


def _severity(severity: str) -> dg.AssetCheckSeverity:
    return dg.AssetCheckSeverity.ERROR if severity == "hard" else dg.AssetCheckSeverity.WARN


def _gate_check(gate: GateRow, asset: dg.AssetKey) -> dg.AssetCheckResult:
    """A gate's check; a gate whose metric does not apply to the run (denominator 0) passes as "n/a"."""
    value = gate.value if gate.applicable else "n/a (applies to no case: does not block)"
    return dg.AssetCheckResult(
        check_name=check_name(gate.metric),
        asset_key=asset,
        passed=gate.passed is not False,
        severity=_severity(gate.severity),
        metadata={"value": value, "threshold": gate.threshold, "op": gate.op},
    )


def release_assets(service: Service) -> list:
    """The service's gate checks on `release_decision`, and the `baseline` ratchet behind them."""
    pool = service.node(EVALUATION_POOL)
    checks = release_gates_check(
        service.gates_config,
        asset=service.key("release_decision"),
        name=service.node("release_gates"),
        pool=pool,
    )

    @dg.asset(
        key=service.key("baseline"),
        io_manager_key=IO_MANAGER_KEY,
        group_name=service.node(GROUP),
        ins={"release_decision": dg.AssetIn(service.key("release_decision"))},
        output_required=False,  # a blocked release materialises nothing
        pool=pool,
        retry_policy=step_retries(),
    )
    def baseline(
        context: dg.AssetExecutionContext, release_decision: ReleaseDecision
    ) -> Iterator[dg.MaterializeResult]:
        """The baseline, tightened with a shipping run's metrics (it only ratchets up).

        It reads the decision and promotes only from `ship`: after a blocked release the step succeeds
        without a materialisation and the baseline file is not touched — except under `baseline_test:
        paired` for a run the paired test alone blocked: a run of the release that founded the reference
        pool (the SUT settings' `release`) joins the pool blocked or not, recorded in its history. The
        ratchet is one locked update of the baseline file (a local path under a lock, or S3 with
        conditional writes), and inside it the run is compared again with the baseline as it is *now*:
        when a concurrent run promoted a stricter value since this run decided, this run is worse than the
        baseline, nothing is written and the step fails saying so. A shipping run that is not better
        anywhere leaves every value as it was (`baseline_test: paired`: the first shipping runs fill the
        reference pool, then only a significant improvement restarts it); no code path lowers one.
        """
        eval_files = service.files
        path, mode = eval_files.baseline_path, eval_files.baseline_mode
        decision = release_decision
        with user_errors():
            config = service.config()
        # A run of the paired pool's founding release joins its pool blocked or not (decision.paired):
        # the ratchet decides, under the lock, whether this run's release is that one.
        pooled = config.baseline_test == "paired" and decision.blocked_by_paired_test_alone()
        if not (decision.ships or pooled) or decision.baseline_figures is None:
            context.log.info(f"release {decision.decision}: the baseline is not touched")
            return
        figures = BaselineFigures.from_dict(decision.baseline_figures)
        seen: dict[str, baselines.BaselineEntry | None] = {}

        def judge(old: baselines.BaselineEntry | None) -> baselines.BaselineEntry | None:
            seen["before"] = old
            comparison = compare_with_baseline(figures, old, config)
            moved = [r for r in comparison.regressions if decision.ships or r.metric != PAIRED_REGRESSION]
            if moved:
                worse = "; ".join(f"{r.metric} {r.current:.4f} vs {r.baseline:.4f}" for r in moved)
                raise InputError(
                    store.name,
                    f"mode '{mode}': the baseline moved since this run decided ({worse}): not promoted",
                )
            run_id, release = context.run.run_id, decision.service_release
            return ratchet_entry(figures, comparison, old, config, run_id, release)

        with user_errors():
            store = open_versioned(path, "baseline", endpoint_url=s3_endpoint())
            entry = baselines.locked_update(store, mode, KNOWN_METRICS, judge, METRIC_SCOPE)
        before = seen.get("before")
        if entry is None or entry is before:
            yield dg.MaterializeResult(metadata={"promoted": False, "reason": "no significant improvement"})
            return
        old = {} if before is None else before.metrics
        changed = [
            (m, "—" if m not in old else f"{old[m]:.4f}", f"{v:.4f}")
            for m, v in sorted(entry.metrics.items())
            if old.get(m) != v
        ]
        yield dg.MaterializeResult(
            metadata={
                "promoted": True,
                "mode": mode,
                "tightened_or_added": len(changed),
                "changes": dg.MetadataValue.md(markdown_table(["metric", "before", "after"], changed)),
                "path": dg.MetadataValue.path(path),
            }
        )

    return [checks, baseline]
