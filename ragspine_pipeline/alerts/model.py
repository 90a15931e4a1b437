"""What an alert says (SPEC §6): which gates, baselines, channels or slices failed, for which index,
golden set and run — built from a release decision, a set of gate results, or a failed run.

An alert is plain data (pydantic, JSON in the outbox); rendering is ``alerts.blocks``, delivery
``alerts.slack``, de-duplication and persistence ``alerts.outbox``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Frozen; unknown keys ignored so that an outbox written by a newer version still reads.
MODEL_CONFIG = ConfigDict(frozen=True, extra="ignore")

AlertKind = Literal["regression", "recovered", "run_failure"]
FindingKind = Literal["gate", "baseline", "channel", "slice"]


class Finding(BaseModel):
    """One thing that fell below its bar: ``value`` against ``reference`` (a threshold or a baseline)."""

    model_config = MODEL_CONFIG

    kind: FindingKind
    name: str  # the metric, extraction channel, or slice (``workflow=expenses``)
    value: float
    reference: float
    reference_kind: Literal["threshold", "baseline"]
    op: str  # what passing needs: ">=" or "<="
    delta: float  # value − reference
    n: int | None = None  # cases behind a slice's rate

    @property
    def key(self) -> str:
        """What de-duplication compares: the same finding on the next run has the same key."""
        return f"{self.kind}:{self.name}"

    @property
    def shortfall(self) -> float:
        """How far on the wrong side of the bar, in the metric's own direction (bigger is worse)."""
        return -self.delta if self.op == ">=" else self.delta


class Alert(BaseModel):
    """One message to post. ``stream`` is what de-duplication tracks (one evaluation of one thing)."""

    model_config = MODEL_CONFIG

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    kind: AlertKind
    stream: str
    title: str
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    index_version: str | None = None
    golden_version: str | None = None
    run_id: str | None = None
    run_url: str | None = None
    findings: list[Finding] = Field(default_factory=list)
    job: str | None = None
    step: str | None = None
    error: str | None = None  # a failed run's error summary, one line

    @property
    def failure_keys(self) -> list[str]:
        return sorted({finding.key for finding in self.findings})

    def worst_first(self) -> list[Finding]:
        """Gates, baselines and channels by how far they fell, then slices by how far they fell."""
        return sorted(self.findings, key=lambda f: (f.kind == "slice", -f.shortfall, f.name))


def run_url(webserver_base_url: str | None, run_id: str | None) -> str | None:
    """The Dagster UI page of a run (``<base>/runs/<id>``), or None without a base URL or run."""
    if not webserver_base_url or not run_id:
        return None
    return f"{webserver_base_url.rstrip('/')}/runs/{run_id}"


def release_findings(decision: dict) -> list[Finding]:
    """The hard gates, baseline regressions and slices a release decision (its JSON) failed."""
    findings = [
        Finding(
            kind="gate",
            name=g["metric"],
            value=g["value"],
            reference=g["threshold"],
            reference_kind="threshold",
            op=g["op"],
            delta=g["delta"],
        )
        for g in decision.get("failed_gates", [])
    ]
    findings += [
        Finding(
            kind="baseline",
            name=r["metric"],
            value=r["current"],
            reference=r["baseline"],
            reference_kind="baseline",
            # A regression is "worse than the baseline": its delta's sign says which way worse is.
            op=">=" if r["delta"] < 0 else "<=",
            delta=r["delta"],
        )
        for r in decision.get("regressions", [])
    ]
    findings += [
        Finding(
            kind="slice",
            name=f"{s['dimension']}={s['value']}",
            value=s["releasable_rate"],
            reference=s["min_rate"],
            reference_kind="threshold",
            op=">=",
            delta=s["releasable_rate"] - s["min_rate"],
            n=s["n"],
        )
        for s in decision.get("failed_slices", [])
    ]
    return findings


def release_alert(decision: dict, stream: str, webserver_base_url: str | None = None) -> Alert:
    """The alert of one release decision: a regression when it blocks, a recovery when it ships.

    Whether it is posted at all is the outbox's call (``Outbox.observe``): a recovery only follows a
    regression, and a regression already announced is not announced again.
    """
    findings = release_findings(decision)
    index = decision.get("index_version") or "unknown index"
    blocked = decision["decision"] == "block"
    title = f"Release blocked: index {index}" if blocked else f"Recovered: release ships on index {index}"
    return Alert(
        kind="regression" if blocked else "recovered",
        stream=stream,
        title=title,
        index_version=decision.get("index_version"),
        golden_version=decision.get("golden_version"),
        run_id=decision.get("run_id"),
        run_url=run_url(webserver_base_url, decision.get("run_id")),
        findings=findings if blocked else [],
    )


def gate_alert(
    findings: Iterable[Finding],
    stream: str,
    subject: str,
    run_id: str | None = None,
    index_version: str | None = None,
    webserver_base_url: str | None = None,
    problem: str = "below baseline",
) -> Alert:
    """A regression (some findings) or recovery (none) alert for any set of gates or channels;
    ``problem`` names what went wrong in the title."""
    findings = list(findings)
    return Alert(
        kind="regression" if findings else "recovered",
        stream=stream,
        title=f"{subject}: {problem}" if findings else f"Recovered: {subject}",
        index_version=index_version,
        run_id=run_id,
        run_url=run_url(webserver_base_url, run_id),
        findings=findings,
    )


def run_failure_alert(
    job: str, run_id: str, step: str | None, error: str, webserver_base_url: str | None = None
) -> Alert:
    """A run that failed for another reason than a gate (a crash, an unreachable SUT, …)."""
    summary = " ".join(error.split())
    return Alert(
        kind="run_failure",
        stream=f"run:{run_id}",
        title=f"Evaluation run failed: {job}",
        run_id=run_id,
        run_url=run_url(webserver_base_url, run_id),
        job=job,
        step=step,
        error=summary[:500] + ("…" if len(summary) > 500 else ""),
    )
