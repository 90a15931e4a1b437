"""The entry a run leaves in its baseline (what a shell writes under the baseline's lock,
``decision.baseline.locked_update``, after judging the run against the entry read there)."""

from __future__ import annotations

from ragspine_pipeline.decision.baseline import BaselineEntry, Comparison, paired_promoted, ratcheted
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.evaluation import BaselineFigures, Evaluation


def promoted_entry(
    evaluation: Evaluation,
    old: BaselineEntry | None,
    config: EvalConfig,
    run_id: str,
    release: str | None = None,
) -> BaselineEntry | None:
    """The entry a run leaves in the baseline (None: leave it as it is): :func:`ratchet_entry` of its
    figures and its comparison with ``old``. A blocked run never promotes; under the paired test, a run
    the paired test alone blocked still reaches it, as a run of the pool's founding release
    (``release``) joins the pool whatever the test said (``decision.paired``, rule 2)."""
    paired = config.baseline_test == "paired"
    if not evaluation.passed and not (paired and evaluation.release.blocked_by_paired_test_alone()):
        return None
    figures = evaluation.baseline_figures(paired=paired)
    return ratchet_entry(figures, evaluation.comparison, old, config, run_id, release)


def ratchet_entry(
    figures: BaselineFigures,
    comparison: Comparison | None,
    old: BaselineEntry | None,
    config: EvalConfig,
    run_id: str,
    release: str | None = None,
) -> BaselineEntry | None:
    """The entry a shipping run with these ``figures`` leaves in the baseline (None: leave it as it is).

    ``strict``: every listed metric tightened to the better of old and current (``baseline.ratcheted``).
    ``paired``: ``baseline.paired_promoted``: the first shipping runs fill the reference pool (up to
    ``paired.pool_runs``), a full pool is frozen, and only a clearly significant improvement restarts it
    from that run (the metrics tightened the same way) — so the baseline never follows a lucky run and
    never moves down; every run of the pool's founding release (``release``) joins it, blocked or not,
    so the pool does not hold only the runs that survived it (``decision.paired``).
    """
    if config.baseline_test == "paired":
        return paired_promoted(
            old,
            figures.metrics,
            cases=figures.case_outcomes or {},
            paired=comparison.paired if comparison is not None else None,
            settings=config.paired,
            fabrication_count=figures.fabrication_count,
            n_cases=figures.n_cases,
            run=run_id,
            release=release,
        )
    return ratcheted(
        old, figures.metrics, fabrication_count=figures.fabrication_count, n_cases=figures.n_cases, run=run_id
    )
