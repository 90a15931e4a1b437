"""One simulated deployment of the nightly path (bench/bench_drift_alarms.py): a night's daily summary is
made — from trace lines through the real sampling and scoring (:class:`TraceNightly`), or drawn directly
(:class:`SummaryNightly`, ``drift_synth``) — and then judged by :meth:`Nightly.judge`, the one place both
paths share: ``drop_tests`` against the earlier summaries → ``drop_alert`` → ``Outbox.observe`` → the parts
the outbox queued, counted as Slack would show them."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from drift_synth import synthesised_summary
from drift_traffic import SEED, VERSION_KEYS

from ragspine_pipeline.alerts.model import Drop
from ragspine_pipeline.alerts.nightly import drop_alert
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.contracts.columns import load_evidence, load_traces
from ragspine_pipeline.files import write_jsonl
from ragspine_pipeline.scoring.drop_settings import DropSettings
from ragspine_pipeline.scoring.production import production_metrics
from ragspine_pipeline.scoring.significance import drop_tests
from ragspine_pipeline.sources.sampling import sample_day
from ragspine_pipeline.sources.trace_store import open_trace_store


@dataclass
class Part:
    """One message the outbox queued tonight, as Slack would show it."""

    kind: str  # "post" (a top-level regression message: incidents open), "reply" or "recovery"
    incidents: list[str]  # the metrics whose incidents it opens, continues or closes
    drops: dict[str, str | None]  # the drops it carries ("metric@slice") and their notes


@dataclass
class Night:
    day: str
    tested: int
    alerts: list[str]  # "metric@slice" of the alerting tests
    posted: str | None  # the kind of the alert the outbox queued, if any
    alone: bool  # would a test have alerted on its own (p <= fdr, large enough), without the control
    opened: int = 0  # top-level regression messages (an incident opens)
    replies: int = 0  # replies in an open incident's thread (a later night of it)
    closed: int = 0  # recoveries (an incident closes)
    notes: list[str] = field(default_factory=list)  # what the alerting tests say ("traffic mix changed")
    # The incidents ("metric@slice") each top-level regression message opened, and each recovery closed.
    opened_about: list[list[str]] = field(default_factory=list)
    closed_about: list[list[str]] = field(default_factory=list)
    noted: dict[str, str | None] = field(default_factory=dict)  # every alerting test's note, by key
    windows: dict[str, int] = field(default_factory=dict)  # every alerting test's window (nights), by key
    parts: list[Part] = field(default_factory=list)  # every message queued tonight

    def about(self, metric: str, kind: str) -> int:
        """Tonight's messages of ``kind`` about ``metric``'s incident."""
        return sum(part.kind == kind and metric in part.incidents for part in self.parts)


class Nightly:
    """One deployment: the summaries so far, an outbox, and which incidents are open (by the messages)."""

    def __init__(self, folder: Path, settings: DropSettings, sample_size: int | None) -> None:
        self.folder, self.settings, self.sample_size = folder, settings, sample_size
        self.outbox = Outbox(folder / "alerts" / "outbox.jsonl")
        self.history: list[dict] = []
        self.open: dict[str, str] = {}  # metric -> the top-level message of its open incident

    def summary(self, index: int, traffic) -> dict:
        """Night ``index`` of ``traffic`` as its daily summary."""
        raise NotImplementedError

    def night(self, index: int, traffic) -> Night:
        """Night ``index`` of ``traffic``, summarised and judged."""
        return self.judge(self.summary(index, traffic), index)

    def remember(self, summary: dict) -> None:
        """A night that is history only (a backfilled night: summarised, never judged or alerted on)."""
        self.history = [*self.history[-self.settings.history_nights :], summary]

    def judge(self, summary: dict, index: int) -> Night:
        """What the nightly path does with a night's summary: its drop tests against the earlier nights,
        the production alert, the outbox's news; and what the outbox queued, as messages."""
        day = summary["day"]
        # The open incidents' levels and the accepted ones, as the nightly asset reads them.
        before = self.outbox.states().get("production")
        tests = drop_tests(
            summary,
            self.history,
            self.settings,
            incidents=before.open_levels() if before is not None else None,
            accepted=before.accepted_since() if before is not None else None,
        )
        self.remember(summary)
        alert = drop_alert(
            day, [Drop.of(t) for t in tests.alerts], run_id=f"night-{index}", returns=tests.returns
        )
        size = self.outbox.path.stat().st_size if self.outbox.path.exists() else 0
        queued = self.outbox.observe(alert)
        alone = any(t.p_value <= self.settings.fdr and self.settings.large_enough(t) for t in tests.tested)
        posted = None if queued is None else queued.kind
        result = Night(day, len(tests.tested), [t.key for t in tests.alerts], posted, alone)
        result.notes = [f"{t.key}: {t.note}" for t in tests.alerts if t.note]
        result.noted = {t.key: t.note for t in tests.alerts}
        result.windows = {t.key: t.nights for t in tests.alerts}
        if queued is None:
            return result
        replied: set[str] = set()
        closed: set[str] = set()
        with self.outbox.path.open() as f:  # every part the night queued, as delivery would post it
            f.seek(size)
            for line in f:
                event = json.loads(line)
                if event.get("event") != "queued":
                    continue
                queued_alert = event["alert"]
                metrics = queued_alert.get("incidents") or []
                drops = {
                    f"{d['metric']}@{d['slice']}": d.get("note") for d in queued_alert.get("drops") or []
                }
                threads = {self.open[m] for m in metrics if m in self.open}
                if queued_alert["kind"] == "recovered":
                    if threads - closed:
                        result.closed_about.append(list(metrics))
                    closed |= threads
                    for metric in metrics:
                        self.open.pop(metric, None)
                    kind = "recovery"
                elif threads:
                    replied |= threads
                    kind = "reply"
                else:
                    result.opened += 1
                    result.opened_about.append(list(metrics))
                    self.open.update(dict.fromkeys(metrics, queued_alert["id"]))
                    kind = "post"
                result.parts.append(Part(kind, list(metrics), drops))
        # One night's parts for one thread are one reply (alerts.delivery), a recovery's too.
        result.replies, result.closed = len(replied), len(closed)
        return result

    def fork(self, folder: Path) -> Nightly:
        """The same deployment from here on, in another folder (its own outbox: the open incidents go on
        in the fork)."""
        folder.mkdir(parents=True, exist_ok=True)
        if (self.folder / "alerts").exists():
            shutil.copytree(self.folder / "alerts", folder / "alerts")
        other = copy.copy(self)
        other.folder = folder
        other.outbox = Outbox(folder / "alerts" / "outbox.jsonl")
        other.history = list(self.history)
        other.open = dict(self.open)
        return other


class TraceNightly(Nightly):
    """The trace-level path: a night's traces are written to a local trace store (``dt=YYYY-MM-DD``) and
    summarised as the nightly job does: ``sample_day`` (the seeded sample), ``load_traces``,
    ``production_metrics`` with the evidence registry."""

    def __init__(self, folder: Path, evidence: Path, sample_size: int, settings: DropSettings) -> None:
        super().__init__(folder, settings, sample_size)
        self.evidence = load_evidence(evidence).table

    @property
    def store(self) -> Path:
        return self.folder / "traces"

    def summary(self, index: int, traffic) -> dict:
        day = (traffic.first + timedelta(days=index)).isoformat()
        partition = self.store / f"dt={day}"
        partition.mkdir(parents=True, exist_ok=True)
        (partition / "part-00000.jsonl").write_text("\n".join(traffic.day_lines(index)) + "\n")
        sample = sample_day(
            open_trace_store(str(self.store)), day, n=self.sample_size, seed=SEED, quarantine=None
        )
        path = self.folder / "sample.jsonl"
        write_jsonl(sample.records, path)
        shutil.rmtree(partition)  # the sample is what the nightly path keeps
        metrics = production_metrics(
            load_traces(path).table, self.evidence, required_versions=VERSION_KEYS
        )  # the version keys the synthetic traces carry, as a deployment's config lists its own
        return {"day": day, **metrics.to_dict()}


class SummaryNightly(Nightly):
    """The summary-level path: a night's summary drawn directly from the traffic's rates (``drift_synth``)."""

    def summary(self, index: int, traffic) -> dict:
        day = (traffic.first + timedelta(days=index)).isoformat()
        return synthesised_summary(traffic, index, day, self.sample_size)
