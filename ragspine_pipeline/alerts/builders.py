"""The alert of each event (``alerts.model`` says what an alert holds): a release decision (a regression
when it blocks, a recovery when it ships), a set of failed gates (an extraction channel), a failed run
and its retry that succeeded, and index versions superseded before they were evaluated. A night's drop
tests raise theirs in ``alerts.nightly``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ragspine_pipeline.alerts.model import Alert, Finding, known, run_url
from ragspine_pipeline.decision.release import ReleaseDecision


def release_findings(decision: ReleaseDecision) -> list[Finding]:
    """The hard gates, baseline regressions and slices a release decision failed."""
    findings = [
        Finding(
            kind="gate",
            name=g.metric,
            value=g.value,
            reference=g.threshold,
            reference_kind="threshold",
            op=g.op,
            delta=g.delta,
        )
        for g in decision.failed_gates
    ]
    findings += [
        Finding(
            kind="baseline",
            name=r.metric,
            value=r.current,
            reference=r.baseline,
            reference_kind="baseline",
            # A regression is "worse than the baseline": its delta's sign says which way worse is.
            op=">=" if r.delta < 0 else "<=",
            delta=r.delta,
        )
        for r in decision.regressions
    ]
    findings += [
        Finding(
            kind="slice",
            name=f"{s.dimension}={s.value}",
            value=s.releasable_rate,
            reference=s.min_rate,
            reference_kind="threshold",
            op=">=",
            delta=s.releasable_rate - s.min_rate,
            n=s.n,
        )
        for s in decision.failed_slices
    ]
    return findings


def release_alert(
    decision: ReleaseDecision,
    stream: str,
    webserver_base_url: str | None = None,
    runbook: str | None = None,
) -> Alert:
    """The alert of one release decision: a regression when it blocks (with the decision's causes), a
    recovery when it ships.

    Whether it is posted at all is the outbox's call (``Outbox.observe``): a recovery only follows a
    regression, and a regression already announced is not announced again.
    """
    index = decision.index_version  # a run of a service with no index manifest names none
    blocked = not decision.ships
    # The run's figures: every metric (rounded), and each gate's value as it was judged (unrounded).
    measured = {name: value for name, value in (decision.metrics or {}).items() if value is not None}
    measured |= {g.metric: g.value for g in decision.gates or [] if g.value is not None}
    if blocked:
        title = f"Release blocked: index {index}" if index else "Release blocked"
    else:
        title = f"Recovered: release ships on index {index}" if index else "Recovered: release ships"
    return Alert(
        kind="regression" if blocked else "recovered",
        stream=stream,
        title=title,
        index_version=decision.index_version,
        golden_version=decision.golden_version,
        run_id=decision.run_id,
        run_url=run_url(webserver_base_url, decision.run_id),
        findings=release_findings(decision) if blocked else [],
        held_gates={g.metric: (g.op, g.threshold) for g in decision.gates or [] if g.passed}
        if blocked
        else {},
        causes=decision.causes if blocked else None,
        problems=[str(p.get("detail")) for p in decision.integrity] if blocked else [],
        runbook=runbook if blocked else None,
        measured={} if blocked else measured,
    )


def gate_alert(
    findings: Iterable[Finding],
    stream: str,
    subject: str,
    run_id: str | None = None,
    index_version: str | None = None,
    webserver_base_url: str | None = None,
    problem: str = "below baseline",
    runbook: str | None = None,
    measured: Mapping[str, float | None] | None = None,
) -> Alert:
    """A regression (some findings) or recovery (none) alert for any set of gates or channels;
    ``problem`` names what went wrong in the title; ``measured`` (each gate's or channel's value now,
    None when it has none) says a recovery's values."""
    findings = list(findings)
    return Alert(
        kind="regression" if findings else "recovered",
        stream=stream,
        title=f"{subject}: {problem}" if findings else f"Recovered: {subject}",
        index_version=index_version,
        run_id=run_id,
        run_url=run_url(webserver_base_url, run_id),
        findings=findings,
        runbook=runbook if findings else None,
        measured={} if findings else known(measured),
    )


def run_failure_alert(
    job: str,
    run_id: str,
    step: str | None,
    error: str,
    webserver_base_url: str | None = None,
    runbook: str | None = None,
    succeeded: Sequence[str] | None = None,
    root_run_id: str | None = None,
) -> Alert:
    """A run that failed for another reason than a gate (a crash, an unreachable SUT, …). ``error`` is
    said on one line, at most 500 characters, never ending with a colon (a wrapper's message whose cause
    was lost): put the root cause first (``defs.run_errors.error_text``). ``succeeded``: the run's steps
    that succeeded before it failed (what a retry from failure does not run again). The stream is the
    run's first attempt's (``root_run_id``: the run a retry or re-execution descends from), so its
    retries speak in one thread (:func:`retry_succeeded_alert`)."""
    summary = " ".join(error.split()).rstrip(": ") or "unknown error"
    return Alert(
        kind="run_failure",
        stream=run_stream(root_run_id or run_id),
        title=f"Evaluation run failed: {job}",
        run_id=run_id,
        run_url=run_url(webserver_base_url, run_id),
        job=job,
        step=step,
        error=summary[:500] + ("…" if len(summary) > 500 else ""),
        runbook=runbook,
        succeeded=None if succeeded is None else list(succeeded),
    )


def run_stream(root_run_id: str) -> str:
    """The stream of a run and of its retries and re-executions: ``run:<its first attempt's id>``."""
    return f"run:{root_run_id}"


def retry_succeeded_alert(
    job: str, run_id: str, root_run_id: str, decision: str | None, webserver_base_url: str | None = None
) -> Alert:
    """A retry (or re-execution) of a failed run that succeeded: posted in the failure's thread, so the
    last word on it is not "failed"; ``decision``: the release decision it reached (None: none)."""
    decided = f" (release decision: {decision})" if decision in ("ship", "block") else ""
    return Alert(
        kind="recovered",
        stream=run_stream(root_run_id),
        title=f"Evaluation run succeeded on retry: {job}{decided}",
        run_id=run_id,
        run_url=run_url(webserver_base_url, run_id),
        job=job,
    )


def superseded_sentence(missed: Sequence[str], evaluated: str) -> str:
    """``index a was superseded by c before it was evaluated`` (several: ``index a, b were …``)."""
    several = len(missed) > 1
    return (
        f"index {', '.join(missed)} {'were' if several else 'was'} superseded by {evaluated} before "
        f"{'they were' if several else 'it was'} evaluated"
    )


def superseded_alert(
    missed: Sequence[str],
    evaluated: str,
    stream: str,
    run_id: str | None = None,
    webserver_base_url: str | None = None,
) -> Alert:
    """The notice that index versions ``missed`` were published and replaced before the index-rebuild
    sensor could request their evaluation, so only ``evaluated`` (the run ``run_id``) was evaluated.
    Queued with that run's alerts, it is said in the run's message; its stream (one per evaluated
    version) makes it news once."""
    sentence = superseded_sentence(missed, evaluated)
    return Alert(
        kind="notice",
        stream=stream,
        title=sentence[0].upper() + sentence[1:],
        index_version=evaluated,
        run_id=run_id,
        run_url=run_url(webserver_base_url, run_id),
    )
