"""The release decision, its gates as blocking asset checks, and the baseline ratchet (SPEC §4, §5).

``release_decision`` is always materialised — a ``block`` is a result, not a crash. ``release_gates``
then reports one check per gate of the committed config (ERROR for hard gates, WARN for soft ones),
one for the slice gate and one for baseline regressions. A failed ERROR check fails the run and skips
``baseline``, so a blocked release can never promote anything.
"""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from ragspine_pipeline.decision import baseline as baselines
from ragspine_pipeline.decision.causes import cause_sentence
from ragspine_pipeline.decision.config import EvalConfig, load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS, promoted_entry, with_baseline
from ragspine_pipeline.decision.gates import Gate, GateResult, default_gates
from ragspine_pipeline.defs.golden import GROUP, ScoredRun, write_json_file
from ragspine_pipeline.defs.metadata import copy_atomically, markdown_table, user_errors
from ragspine_pipeline.defs.resources import EvalFiles, committed_config, gates_config_path
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.versioned import open_versioned, s3_endpoint

ASSET_KEY = dg.AssetKey("release_decision")
SLICE_CHECK = "slice_gate"
BASELINE_CHECK = "no_regression_vs_baseline"
INDEX_CHECK = "single_index_version"


def check_name(metric: str) -> str:
    """A Dagster-safe check name for a gate: ``recall@k`` → ``gate_recall_at_k``."""
    return "gate_" + metric.replace("@", "_at_").replace("-", "_")


def committed_gates(path: Path | None = None) -> tuple[EvalConfig, list[Gate]]:
    """The gates config every check is built from (read once, when the definitions load).

    A config without ``gates`` gets a check for every default gate of every dialect: which of them a
    run applies depends on its data (``decision.evaluation.default_gates_for``); the others report
    "not gated" for that run.
    """
    config = load_config(path or gates_config_path(), KNOWN_METRICS)
    return config, config.gate_list(KNOWN_METRICS) or default_gates(grounded=True, qa=True)


def decision_record(scored: ScoredRun) -> dict:
    """``release_decision.json``: the SPEC §4 decision with the gates, metrics and warnings of the run."""
    report = scored.report
    return {
        **report["release"],
        "gates": report["gates"],
        "metrics": {name: round(value, 4) for name, value in scored.evaluation.metrics.items()},
        "not_applicable": report["not_applicable"],
        "warnings": report["warnings"],
    }


@dg.asset(group_name=GROUP)
def release_decision(
    context: dg.AssetExecutionContext, metric_table: ScoredRun, eval_files: EvalFiles
) -> dg.Output[ScoredRun]:
    """``ship`` or ``block`` with every reason (SPEC §4), written to ``release_decision.json``."""
    release = metric_table.evaluation.release
    path = eval_files.run_dir(context.run.run_id) / "release_decision.json"
    with user_errors():
        write_json_file(path, decision_record(metric_table))
    copy_atomically(path, eval_files.latest_dir() / "release_decision.json")
    failed = [
        (g.metric, f"{g.value:.4f}", f"{g.op} {g.threshold}", f"{g.delta:+.4f}", g.severity)
        for g in [*release.failed_gates, *release.warned_gates]
    ]
    failed += [
        (g["metric"], "not measured", f"{g['op']} {g['threshold']}", "", g["severity"])
        for g in release.unmeasured_gates
    ]
    slices = [
        (
            f"{s.dimension}={s.value}",
            s.n,
            f"{s.releasable_rate:.3f}",
            f"{s.ci95[0]:.3f}–{s.ci95[1]:.3f}",
            f"≥ {s.min_rate}",
        )
        for s in release.failed_slices
    ]
    why = cause_sentence(release.causes) if not release.ships else None
    return dg.Output(
        metric_table,
        metadata={
            "decision": release.decision,
            **({"why": why} if why else {}),
            "index_version": release.index_version or "unknown",
            "golden_version": release.golden_version or "unfrozen",
            "failed_gates": len(release.failed_gates),
            "warned_gates": len(release.warned_gates),
            "failed_slices": len(release.failed_slices),
            "regressions": len(release.regressions),
            "not_applicable_gates": ", ".join(
                r.gate.metric for r in metric_table.evaluation.gates if not r.applicable
            )
            or "none",
            "reasons": dg.MetadataValue.md(
                markdown_table(["gate", "value", "needs", "delta", "severity"], failed)
                + "\n\n"
                + markdown_table(["slice", "n", "releasable", "95% CI", "needs"], slices)
            ),
            "decision_path": dg.MetadataValue.path(str(path)),
        },
    )


def release_gates_check(config_path: Path | None = None) -> dg.AssetChecksDefinition:
    """One blocking check per committed gate, plus the slice gate and the baseline, in one step.

    A separate step from ``release_decision`` on purpose: the decision is stored and announced
    (``regression_alert``) whatever these checks say, while ``baseline`` waits for them.
    """
    _config, gates = committed_gates(config_path)
    check_names = [check_name(g.metric) for g in gates]
    specs = [
        dg.AssetCheckSpec(
            check_name(g.metric),
            asset=release_decision,
            blocking=True,
            description=f"{g.severity} gate: {g.metric} {g.op} {g.threshold}",
        )
        for g in gates
    ]
    specs += [
        dg.AssetCheckSpec(
            SLICE_CHECK,
            asset=release_decision,
            blocking=True,
            description="every slice with enough cases meets the slice gate",
        ),
        dg.AssetCheckSpec(
            BASELINE_CHECK,
            asset=release_decision,
            blocking=True,
            description="no baselined metric is worse than its baseline (equal passes)",
        ),
        dg.AssetCheckSpec(
            INDEX_CHECK,
            asset=release_decision,
            blocking=True,
            description="the replay's traces name one index version, the one the run was requested for",
        ),
    ]

    @dg.multi_asset_check(specs=specs, name="release_gates")
    def release_gates(release_decision: ScoredRun) -> Iterator[dg.AssetCheckResult]:
        release = release_decision.evaluation.release
        checked = set()
        for result in release_decision.evaluation.gates:
            checked.add(check_name(result.gate.metric))
            yield _gate_check(result)
        for gate in release.unmeasured_gates:  # e.g. a judged metric when the judge step failed
            checked.add(check_name(gate["metric"]))
            yield dg.AssetCheckResult(
                check_name=check_name(gate["metric"]),
                asset_key=ASSET_KEY,
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR
                if gate["severity"] == "hard"
                else dg.AssetCheckSeverity.WARN,
                metadata={"value": "not measured", "threshold": gate["threshold"], "op": gate["op"]},
            )
        for name in check_names:  # a default gate of another dialect than this run's data
            if name not in checked:
                yield dg.AssetCheckResult(
                    check_name=name, asset_key=ASSET_KEY, passed=True, metadata={"value": "not gated"}
                )
        yield dg.AssetCheckResult(
            check_name=SLICE_CHECK,
            asset_key=ASSET_KEY,
            passed=not release.failed_slices,
            metadata={"failed_slices": [f"{s.dimension}={s.value}" for s in release.failed_slices]},
        )
        yield dg.AssetCheckResult(
            check_name=BASELINE_CHECK,
            asset_key=ASSET_KEY,
            passed=not release.regressions,
            metadata={"regressions": dg.MetadataValue.json(release.regressions)},
        )
        yield dg.AssetCheckResult(
            check_name=INDEX_CHECK,
            asset_key=ASSET_KEY,
            passed=not release.integrity,
            description="; ".join(problem["detail"] for problem in release.integrity) or None,
            metadata={"index_versions": dg.MetadataValue.json(release.index_versions)},
        )

    return release_gates


def _gate_check(result: GateResult) -> dg.AssetCheckResult:
    """A gate's check; a gate whose metric does not apply to the run (denominator 0) passes as "n/a"."""
    gate = result.gate
    value = result.value if result.applicable else "n/a (applies to no case: does not block)"
    return dg.AssetCheckResult(
        check_name=check_name(gate.metric),
        asset_key=ASSET_KEY,
        passed=result.passed is not False,
        severity=dg.AssetCheckSeverity.ERROR if gate.hard else dg.AssetCheckSeverity.WARN,
        metadata={"value": value, "threshold": gate.threshold, "op": gate.op},
    )


@dg.asset(group_name=GROUP)
def baseline(
    context: dg.AssetExecutionContext, release_decision: ScoredRun, eval_files: EvalFiles
) -> dg.MaterializeResult:
    """The baseline, tightened with a shipping run's metrics (it only ratchets up).

    Downstream of the blocking gate checks: a blocked release never gets here. The ratchet is one
    locked update of the baseline file (a local path under a lock, or S3 with conditional writes), and
    inside it the run is compared again with the baseline as it is *now*: when a concurrent run promoted
    a stricter value since this run decided, this run is worse than the baseline, nothing is written
    and the step fails saying so. A shipping run that is not better anywhere leaves every value as it
    was (``baseline_test: paired``: unless it is a significant improvement); no code path lowers one.
    """
    evaluation = release_decision.evaluation
    path, mode = eval_files.baseline_path, eval_files.baseline_mode
    if not evaluation.passed:  # defensive: the checks already stop a blocked run
        return dg.MaterializeResult(metadata={"promoted": False, "reason": "release blocked"})
    seen: dict[str, baselines.BaselineEntry | None] = {}

    def judge(old: baselines.BaselineEntry | None) -> baselines.BaselineEntry | None:
        seen["before"] = old
        judged = with_baseline(evaluation, old, config)
        if not judged.passed:
            worse = "; ".join(
                f"{r['metric']} {r['current']:.4f} vs {r['baseline']:.4f}" for r in judged.release.regressions
            )
            raise InputError(
                store.name,
                f"mode '{mode}': the baseline moved since this run decided ({worse}): not promoted",
            )
        return promoted_entry(judged, old, config, context.run.run_id)

    with user_errors():
        config = committed_config()
        store = open_versioned(path, "baseline", endpoint_url=s3_endpoint())
        entry = baselines.locked_update(store, mode, KNOWN_METRICS, judge)
    before = seen.get("before")
    if entry is None or entry is before:
        return dg.MaterializeResult(metadata={"promoted": False, "reason": "no significant improvement"})
    old = {} if before is None else before.metrics
    changed = [
        (m, "—" if m not in old else f"{old[m]:.4f}", f"{v:.4f}")
        for m, v in sorted(entry.metrics.items())
        if old.get(m) != v
    ]
    return dg.MaterializeResult(
        metadata={
            "promoted": True,
            "mode": mode,
            "tightened_or_added": len(changed),
            "changes": dg.MetadataValue.md(markdown_table(["metric", "before", "after"], changed)),
            "path": dg.MetadataValue.path(path),
        }
    )
