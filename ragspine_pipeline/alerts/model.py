"""What an alert says: which gates, baselines, channels, slices or production rates failed, why, for
which index, golden set and run, and what to do (a runbook line) — built (``alerts.builders``,
``alerts.nightly``) from a release decision, a set of gate results, a night's drop tests, or a failed run
(with the steps that succeeded before it failed); and a notice of what no gate measures: an index
version replaced before it could be evaluated.

An alert is plain data (pydantic, JSON in the outbox); rendering is ``alerts.blocks``, delivery
``alerts.delivery`` (through ``alerts.slack``), de-duplication ``alerts.events``, persistence
``alerts.outbox`` (a file) or ``alerts.pg_outbox`` (PostgreSQL), a regression's thread and what a
recovery closes ``alerts.incidents``. The alerts one run raises are delivered together, as one message;
a recovery is a reply in the thread of the regression it closes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from ragspine_pipeline.decision.baseline import COUNT_METRIC, COUNT_METRICS, FABRICATION
from ragspine_pipeline.pages import CASE_EXPLORER_PAGE, REPORT_PAGE
from ragspine_pipeline.scoring.drop_results import MIX_ALONE, FrozenLevel, ReturnTest

if TYPE_CHECKING:  # only the type: scipy, behind it, takes a second to import for every `alerts` command
    from ragspine_pipeline.scoring.significance import DropTest

# Frozen; unknown keys ignored so that an outbox written by a newer version still reads.
MODEL_CONFIG = ConfigDict(frozen=True, extra="ignore")

# A notice tells something no gate measured (an index version replaced before it was evaluated); an
# acceptance, that a person accepted a production rate's new level (it closes the rate's incident).
AlertKind = Literal["regression", "recovered", "run_failure", "notice", "accepted"]
FindingKind = Literal["gate", "baseline", "channel", "slice"]
# The baseline of the fabrication gate's count is recorded as its own entry; both are one metric.
SAME_METRIC = {FABRICATION: COUNT_METRIC}


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
    n: int | None = None  # cases behind a slice's rate; cells behind a channel's accuracy
    correct: int | None = None  # a channel's correct cells (of n)

    @property
    def key(self) -> str:
        """What de-duplication compares: the same finding on the next run has the same key."""
        return f"{self.kind}:{self.name}"

    @property
    def shortfall(self) -> float:
        """How far on the wrong side of the bar, in the metric's own direction (bigger is worse)."""
        return -self.delta if self.op == ">=" else self.delta


class Drop(BaseModel):
    """A production rate significantly worse tonight than over its trailing nights (never a threshold:
    the trailing value is an estimate with its own n)."""

    model_config = MODEL_CONFIG

    metric: str
    slice: str  # "all traffic" or "dimension=value"
    nights: int  # tonight alone (1) or the last few nights pooled
    current: float
    current_n: int
    trailing: float
    trailing_n: int
    trailing_days: int
    worse_by: float  # rate points, in the metric's own direction
    p_value: float
    q_value: float  # adjusted over the night's tests
    note: str | None = None  # "traffic mix changed: …" when the mix-adjusted rate did not drop
    # The trailing level on the arcsine scale, its variance and τ²: what an incident this drop opens is
    # judged against (``frozen``). None in alerts written before incidents kept their levels.
    level: float | None = None
    level_variance: float | None = None
    tau2: float | None = None

    @property
    def name(self) -> str:
        """The rate and slice, as a recovery's ``measured`` values name them (``DropTest.key``)."""
        return f"{self.metric}@{self.slice}"

    @property
    def key(self) -> str:
        return f"drop:{self.name}"

    @property
    def mix_alone(self) -> bool:
        """Explained by a change of the traffic mix alone: its rate at the usual mix did not drop."""
        return self.note is not None and self.note.startswith(MIX_ALONE)

    @classmethod
    def of(cls, test: DropTest) -> Drop:
        """What an alert says about an alerting drop test."""
        return cls(**{name: getattr(test, name) for name in cls.model_fields})

    def frozen(self, night: str) -> FrozenLevel | None:
        """The level an incident this drop opens on ``night`` is judged against (None: not kept)."""
        if self.level is None or self.level_variance is None:
            return None
        return FrozenLevel(
            metric=self.metric, slice=self.slice, nights=self.nights, level=self.level,
            level_variance=self.level_variance, tau2=self.tau2 or 0.0, trailing=self.trailing, since=night,
            dropped_to=self.current,
        )  # fmt: skip


class Acceptance(BaseModel):
    """A person accepted the level production rates stand at now as their new one: ``rates`` are
    ``metric@slice`` or a whole ``metric`` (every rate of its incident). Recorded like a baseline change:
    who, when, why."""

    model_config = MODEL_CONFIG

    rates: list[str]
    by: str
    reason: str
    at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    closes: bool = False  # of one incident's part: it accepted the incident's last rates (it closes)


class MetricRow(BaseModel):
    """One metric of a regression: its value against its gate, its baseline, or both."""

    model_config = MODEL_CONFIG

    name: str
    kind: Literal["metric", "channel"]
    value: float
    gate: tuple[str, float] | None = None  # (op, threshold) of a failed gate
    held: tuple[str, float] | None = None  # (op, threshold) of its gate when that held
    baseline: tuple[str, float] | None = None  # (op, baseline) when worse than its baseline
    shortfall: float  # the larger of the two, in the metric's own direction
    counts: tuple[int, int] | None = None  # (correct, total) behind a channel's accuracy


class Recovery(BaseModel):
    """One thing a recovery closes: what its regression said (``was``, against the same bars) and the
    recovering run's value (``now``; None when that run does not report it by name, as a slice that
    passes again)."""

    model_config = MODEL_CONFIG

    name: str  # a metric, channel, slice (``workflow=expenses``) or production rate (``rate@slice``)
    kind: Literal["metric", "channel", "slice", "rate"]
    was: float
    now: float | None = None
    gate: tuple[str, float] | None = None  # (op, threshold) the regression failed
    baseline: tuple[str, float] | None = None  # (op, baseline) the regression fell below
    trailing: float | None = None  # a production rate's trailing value when it dropped (an estimate)
    n: int | None = None  # the cases behind a slice's rate when it failed
    counts: tuple[int, int] | None = None  # (correct, total) behind a channel's accuracy when it failed


class Alert(BaseModel):
    """One message to post. ``stream`` is what de-duplication tracks (one evaluation of one thing)."""

    model_config = MODEL_CONFIG

    # Ids travel space-separated in the Slack message's metadata: no spaces, nothing to escape.
    id: str = Field(default_factory=lambda: uuid.uuid4().hex, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    kind: AlertKind
    stream: str
    title: str
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    index_version: str | None = None
    golden_version: str | None = None
    run_id: str | None = None
    run_url: str | None = None
    report_url: str | None = None  # the run's HTML report, where reports are served
    explorer_url: str | None = None  # the run's case explorer, where reports are served
    findings: list[Finding] = Field(default_factory=list)
    # The gates of a release run that held, by metric: (op, threshold), shown beside a metric that failed
    # only its baseline (a metric with no gate at all has none).
    held_gates: dict[str, tuple[str, float]] = Field(default_factory=dict)
    drops: list[Drop] = Field(default_factory=list)
    causes: dict | None = None  # a release decision's causes (first failed stages, rules, worst cases)
    problems: list[str] = Field(default_factory=list)  # why the run cannot be judged (mixed index versions)
    runbook: str | None = None  # what to do, one line
    job: str | None = None
    step: str | None = None
    error: str | None = None  # a failed run's error summary, one line
    # A failed run's steps that succeeded, in order (None: not known, as in an alert of an older version).
    succeeded: list[str] | None = None
    # A recovery's values now, by the name its regression's findings and drops use (``Drop.name``).
    measured: dict[str, float] = Field(default_factory=dict)
    # What a recovery closes: filled when it is posted (``incidents.closing``), never in the outbox.
    recovered: list[Recovery] = Field(default_factory=list)
    # The night a production alert is about (``drop_alert``), and the incidents of its stream it opens,
    # continues or closes: their metrics (``streams.observed`` fills them; empty on other streams).
    night: str | None = None
    incidents: list[str] = Field(default_factory=list)
    # A night's rates of open incidents against the levels they dropped from (``scoring.significance``).
    returns: list[ReturnTest] = Field(default_factory=list)
    accepted: Acceptance | None = None  # an acceptance: what was accepted, by whom and why

    @property
    def failure_keys(self) -> list[str]:
        """What fails: findings and drops by key; a failed run by its run id (an attempt on its stream)."""
        keys = {finding.key for finding in self.findings} | {drop.key for drop in self.drops}
        if self.kind == "run_failure" and self.run_id:
            keys.add(f"attempt:{self.run_id}")  # streams.ATTEMPT
        return sorted(keys)

    def worst_first(self) -> list[Finding]:
        """Gates, baselines and channels by how far they fell, then slices by how far they fell."""
        return sorted(self.findings, key=lambda f: (f.kind == "slice", -f.shortfall, f.name))

    def metric_rows(self) -> list[MetricRow]:
        """One row per metric or channel: a failed gate and a regression of the same metric are one row
        with both bars. Rows with a failed gate come first, then the rest; each rates by shortfall, then
        counts."""
        rows: dict[str, dict] = {}
        for f in self.findings:
            if f.kind == "slice":
                continue
            name = SAME_METRIC.get(f.name, f.name)
            row = rows.setdefault(
                name,
                {"name": name, "kind": "channel" if f.kind == "channel" else "metric", "value": f.value,
                 "shortfall": f.shortfall},
            )  # fmt: skip
            if f.correct is not None and f.n is not None:
                row["counts"] = (f.correct, f.n)
            row["shortfall"] = max(row["shortfall"], f.shortfall)
            if f.kind == "gate":
                row["gate"], row["value"] = (f.op, f.reference), f.value
            else:
                row["baseline"] = (f.op, f.reference)
        for name, row in rows.items():
            if "gate" not in row and name in self.held_gates:
                row["held"] = self.held_gates[name]
        # A count's shortfall (fabricated answers) is not on a rate's scale: counts follow the rates.
        ordered = sorted(
            rows.values(),
            key=lambda r: ("gate" not in r, r["name"] in COUNT_METRICS, -r["shortfall"], r["name"]),
        )
        return [MetricRow(**row) for row in ordered]

    @property
    def failed_slices(self) -> list[Finding]:
        return [f for f in self.worst_first() if f.kind == "slice"]


def run_url(webserver_base_url: str | None, run_id: str | None) -> str | None:
    """The Dagster UI page of a run (``<base>/runs/<id>``, the id percent-encoded), or None without a
    base URL or run."""
    if not webserver_base_url or not run_id:
        return None
    return f"{webserver_base_url.rstrip('/')}/runs/{quote(run_id, safe='')}"


REPORT_PAGES = {"report_url": REPORT_PAGE, "explorer_url": CASE_EXPLORER_PAGE}


def with_report_links(alert: Alert, reports_base_url: str | None) -> Alert:
    """``alert`` linking its run's pages where the reports folder is served: the report
    (``<base>/runs/<run id>/slice_report.html``) and the case explorer (``…/case_explorer.html``), the
    run id percent-encoded. Unchanged without a base URL or a run, and for a run failure (a run that
    crashed has no report)."""
    if not reports_base_url or not alert.run_id or alert.kind == "run_failure":
        return alert
    run = f"{reports_base_url.rstrip('/')}/runs/{quote(alert.run_id, safe='')}"
    return alert.model_copy(update={name: f"{run}/{page}" for name, page in REPORT_PAGES.items()})


def runbook_line(stream: str, runbooks: dict[str, str] | None = None, url: str | None = None) -> str | None:
    """What to do when ``stream`` (``release``, ``extraction``, ``production`` or ``run_failure``) alerts:
    its configured text, the runbook URL, or both; None when neither is configured."""
    text = (runbooks or {}).get(stream)
    if text and url:
        return f"{text} ({url})"
    return text or url or None


def known(values: Mapping[str, float | None] | None) -> dict[str, float]:
    return {name: float(value) for name, value in (values or {}).items() if value is not None}
