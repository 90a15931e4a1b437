"""Benchmark: false alarms and power of the nightly drop tests, through the real nightly path (issue 14).

    python bench/bench_drift_alarms.py [--nights 600] [--replicates 100] [--only NAME ...] [--jobs 2]
                                       [--set fdr=0.03 ...] [--json F]

Every simulated night writes one day of traces to a local trace store (``dt=YYYY-MM-DD/part-00000.jsonl``)
and runs what the nightly job runs on it: ``sample_day`` (the seeded sample), ``load_traces``,
``production_metrics`` with the evidence registry, ``drop_tests`` against the earlier nights' summaries
(settings from the packaged gates config), the production alert (``alerts.model.drop_alert``) and
``Outbox.observe`` (de-duplication): a *post* is an alert the outbox queues as news, a regression or a
recovery. Nothing is mocked; only the traffic is simulated.

Quiet scenarios (nothing changes; only the first 31 nights are history, never judged):

* ``quiet-8x1000``: 8 slices of 125 traces a night (1,000 a day, all sampled); each rate's log-odds
  jitters from night to night by N(0, 0.1²) independently in every slice (and for every rate);
* ``quiet-8x1000-shared``: the same jitter, shared by every slice (a day that is worse everywhere);
* ``quiet-8x1000-steady``: no jitter, sampling noise only;
* ``quiet-demo``: the embedded demo's own traffic generator (the reference engine answering the demo's
  question pool, 300 traces a day with its daily mix, volume and latency variation), sampled to 200 a
  day as ``make run`` does.

Drop scenarios fork from a quiet history at every 3rd night after the warm-up: the nights before are the
quiet ones, then the retrieved-citation rate (90 % before) falls from that night on, and the fork's own
nights are scored exactly like the others:

* ``drop-all-5pt``: by 5 points in all traffic (1,000 a day): alerted the same night?
* ``drop-slice-10pt``: by 10 points in one slice of 125 a day: alerted within 3 nights?

A rare failure doubling (its own history: 4 slices of 300 traces a day, all sampled, 2 % of them
refused, forked the same way):

* ``drop-rare-2to4``: the ``refusal_rate`` (higher is worse: its failure share is itself) goes from 2 %
  to 4 % in one slice of 300 a day: alerted within 7 nights? (Worse by exactly the default ``min_drop``,
  so mostly caught by ``min_relative_change``.)

After an aberrant night (forked the same way; the nights between are quiet):

* ``outage-then-drop-5pt``: one night of outage (the retrieved-citation rate in all traffic at half its
  90 %), then the 5-point drop in all traffic from 7 nights later: alerted on the drop's first night?
* ``dip-10pt-then-drop-5pt``: the same after a one-night dip of 10 points;
* ``no-dip-then-drop-5pt``: the control, the same nights without the bad one.

Each runs over the steady and the jittered history. Detection means the outbox queued an alert naming
the retrieved-citation rate in the dropped slice (or all traffic); the delay is the night it first did.

Targets (issue 14): ≤ 1 alerting night per 30 with no change for ``quiet-8x1000`` and ``quiet-demo``;
``drop-all-5pt`` and both after-a-bad-night scenarios same night with probability ≥ 0.8 (reported with
a 95 % Wilson interval); ``drop-slice-10pt`` within 3 nights with probability
≥ 0.8; ``drop-rare-2to4`` within 7 nights with probability ≥ 0.8. Results: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragspine_pipeline.alerts.model import Drop, drop_alert  # noqa: E402
from ragspine_pipeline.alerts.outbox import Outbox  # noqa: E402
from ragspine_pipeline.contracts.columns import load_evidence, load_traces  # noqa: E402
from ragspine_pipeline.defs.resources import committed_config  # noqa: E402
from ragspine_pipeline.files import write_jsonl  # noqa: E402
from ragspine_pipeline.scoring.drop_settings import DropSettings  # noqa: E402
from ragspine_pipeline.scoring.production import production_metrics  # noqa: E402
from ragspine_pipeline.scoring.significance import drop_tests  # noqa: E402
from ragspine_pipeline.scoring.stats import wilson  # noqa: E402
from ragspine_pipeline.sources.sampling import sample_day  # noqa: E402
from ragspine_pipeline.sources.trace_store import open_trace_store  # noqa: E402

FIRST = date(2026, 1, 1)
WARMUP = 31  # history nights: the variance window (28) and the three-night window need them
VERSION_KEYS = ("index", "retriever")  # what every synthetic trace's `versions` names
SEED = 7
DROPPED = "retrieved_citation_rate"  # shipped answers whose citations were all retrieved
CHUNK_TEXT = "the release freeze starts on friday and exceptions are approved by the release manager"
SUPPORTED, UNSUPPORTED = "freeze starts on friday", "budget was doubled"


# -- simulated traffic -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rates:
    """What a trace does, by probability (before the night's jitter)."""

    refusal: float = 0.07
    fabrication: float = 0.03  # of refusals: a number in the refusal text
    cited: float = 0.97  # of shipped answers: carries citations (compliance)
    valid: float = 0.90 / 0.97  # of citing answers: every citation was retrieved (the rate 0.90)
    admissible: float = 0.97  # no restricted chunk retrieved
    supported: float = 0.92  # a claim of a sound answer is supported by its context
    unsound: float = 0.10  # answers whose claims are mostly unsupported (0.3): claims cluster in answers


@dataclass(frozen=True)
class Traffic:
    """Synthetic production traffic: ``slices`` equal slices of ``per_slice`` traces a night."""

    slices: int = 8
    per_slice: int = 125
    jitter: float = 0.0
    shared: bool = False  # one jitter a night for all slices (else one per slice)
    rates: Rates = field(default_factory=Rates)
    drop_from: int | None = None  # night index from which the ``drop_rate`` is lower
    drop_slice: int | None = None  # None: every slice (all traffic)
    drop_points: float = 0.0
    drop_rate: str = "valid"  # the Rates field that worsens (valid: the retrieved-citation rate)
    dip_at: int | None = None  # one night on which the retrieved-citation rate is lower in every slice
    dip_points: float = 0.0
    # A weekly traffic mix: each slice's share of the day's slices × per_slice traces on weekdays and on
    # weekends (None: equal slices every day), and each slice's own retrieved-citation rate.
    weekday_mix: tuple[float, ...] | None = None
    weekend_mix: tuple[float, ...] | None = None
    slice_valid: tuple[float, ...] | None = None
    later_mix: tuple[float, ...] | None = None  # every day's mix from night ``drop_from`` on

    def sizes(self, night: int) -> list[int]:
        if self.weekday_mix is None:
            return [self.per_slice] * self.slices
        weekend = (FIRST + timedelta(days=night)).weekday() >= 5
        mix = self.weekend_mix if weekend else self.weekday_mix
        if self.later_mix is not None and self.drop_from is not None and night >= self.drop_from:
            mix = self.later_mix
        return [round(share * self.slices * self.per_slice) for share in mix]

    def day_lines(self, night: int) -> list[str]:
        rng = np.random.default_rng([SEED, night, self.slices, self.per_slice])
        day = (FIRST + timedelta(days=night)).isoformat()
        names = [f for f in Rates.__dataclass_fields__ if f != "unsound"]
        base = np.tile([getattr(self.rates, name) for name in names], (self.slices, 1))
        if self.slice_valid is not None:
            base[:, names.index("valid")] = np.array(self.slice_valid) / self.rates.cited
        shape = (1 if self.shared else self.slices, len(names))
        logit = np.log(base / (1 - base)) + rng.normal(0, self.jitter, shape) * (self.jitter > 0)
        p = 1 / (1 + np.exp(-logit))
        if self.drop_from is not None and night >= self.drop_from:
            rows = range(self.slices) if self.drop_slice is None else [self.drop_slice]
            for s in rows:
                # "valid" is a rate among citing answers: its drop is scaled to one among all answers;
                # more refusals is worse
                scale = (
                    self.rates.cited
                    if self.drop_rate == "valid"
                    else -1.0
                    if self.drop_rate == "refusal"
                    else 1.0
                )
                p[s, names.index(self.drop_rate)] -= self.drop_points / scale
        if night == self.dip_at:
            p[:, names.index("valid")] -= self.dip_points / self.rates.cited
        lines = []
        for s, size in enumerate(self.sizes(night)):
            prob = dict(zip(names, p[s], strict=True))
            draws = rng.random((size, 9))
            for i in range(size):
                lines.append(_trace(f"{day}-{s}-{i}", f"s{s}", prob, self.rates.unsound, draws[i]))
        return lines


def _trace(request_id: str, slice_name: str, p: dict, unsound: float, u: np.ndarray) -> str:
    retrieved = ["c1", "c2", "c3"] + (["r1"] if u[0] >= p["admissible"] else [])
    trace = {
        "request_id": request_id,
        "tags": {"slice": slice_name},
        "retrieved_ids": retrieved,
        "selected_context_ids": ["c1", "c2"],
        "selected_versions": ["v1", "v1"],
        "versions": {"index": "ix-1", "retriever": "bm25-1"},
        "latency_ms": 700 + int(600 * u[7]),
    }
    if u[1] < p["refusal"]:
        text = "not in context: it was 42 days" if u[2] < p["fabrication"] else "not in context"
        trace["answer"] = {"claim": text}
        trace["outcome"] = {"refused": True}
        return json.dumps(trace)
    support = p["supported"] if u[3] >= unsound else 0.3
    if u[4] >= p["cited"]:  # no citations at all: one claim, its text judged by token overlap
        trace["answer"] = {"claim": CHUNK_TEXT if u[5] < support else "the budget was doubled last year"}
        return json.dumps(trace)
    cited = "c1" if u[6] < p["valid"] else "c9"  # c9 exists but was not retrieved: an invalid citation
    claims = [
        {
            "claim_id": f"k{k}",
            "text": f"claim {k}",
            "citation_id": cited,
            "support_phrases": [SUPPORTED if draw < support else UNSUPPORTED],
        }
        for k, draw in enumerate((u[5], u[8]))
    ]
    trace["answer"] = {"claim": "The freeze starts on Friday.", "citations": [cited], "claims": claims}
    return json.dumps(trace)


def write_registry(path: Path) -> Path:
    rows = [
        {"chunk_id": cid, "document_id": "freeze", "parent_id": None, "version": "v1",
         "permitted": cid != "r1", "current": True, "text": CHUNK_TEXT}
        for cid in ("c1", "c2", "c3", "c9", "r1")
    ]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


class DemoTraffic:
    """The embedded demo's own production traffic generator, night by night."""

    def __init__(self, traces_per_day: int = 300) -> None:
        from ragspine_pipeline.demo.build import production_engine

        self.engine = production_engine()
        self.traces_per_day = traces_per_day

    def day_lines(self, night: int) -> list[str]:
        from ragspine_pipeline.demo.build import production_day_lines

        return production_day_lines(self.engine, FIRST + timedelta(days=night), self.traces_per_day, SEED)


# -- the nightly path ------------------------------------------------------------------------------


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


class Nightly:
    """One deployment: a trace store, the evidence registry, the summaries so far and an outbox."""

    def __init__(self, folder: Path, evidence: Path, sample_size: int, settings: DropSettings) -> None:
        self.folder, self.sample_size, self.settings = folder, sample_size, settings
        self.store = folder / "traces"
        self.evidence = load_evidence(evidence).table
        self.outbox = Outbox(folder / "alerts" / "outbox.jsonl")
        self.history: list[dict] = []
        self.open: dict[str, str] = {}  # metric -> the top-level message of its open incident

    def night(self, index: int, lines: list[str]) -> Night:
        day = (FIRST + timedelta(days=index)).isoformat()
        partition = self.store / f"dt={day}"
        partition.mkdir(parents=True, exist_ok=True)
        (partition / "part-00000.jsonl").write_text("\n".join(lines) + "\n")
        sample = sample_day(
            open_trace_store(str(self.store)), day, n=self.sample_size, seed=SEED, quarantine=None
        )
        path = self.folder / "sample.jsonl"
        write_jsonl(sample.records, path)
        metrics = production_metrics(
            load_traces(path).table, self.evidence, required_versions=VERSION_KEYS
        )  # the version keys the synthetic traces carry, as a deployment's config lists its own
        summary = {"day": day, **metrics.to_dict()}
        tests = drop_tests(summary, self.history, self.settings)
        self.history = [*self.history[-self.settings.history_nights :], summary]
        alert = drop_alert(day, [Drop.of(t) for t in tests.alerts], run_id=f"night-{index}")
        size = self.outbox.path.stat().st_size if self.outbox.path.exists() else 0
        queued = self.outbox.observe(alert)
        shutil.rmtree(partition)  # the sample is what the nightly path keeps
        alone = any(t.p_value <= self.settings.fdr and self.settings.large_enough(t) for t in tests.tested)
        posted = None if queued is None else queued.kind
        result = Night(day, len(tests.tested), [t.key for t in tests.alerts], posted, alone)
        result.notes = [f"{t.key}: {t.note}" for t in tests.alerts if t.note]
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
                threads = {self.open[m] for m in metrics if m in self.open}
                if queued_alert["kind"] == "recovered":
                    if threads - closed:
                        result.closed_about.append(list(metrics))
                    closed |= threads
                    for metric in metrics:
                        self.open.pop(metric, None)
                elif threads:
                    replied |= threads
                else:
                    result.opened += 1
                    result.opened_about.append(list(metrics))
                    self.open.update(dict.fromkeys(metrics, queued_alert["id"]))
        # One night's parts for one thread are one reply (alerts.delivery), a recovery's too.
        result.replies, result.closed = len(replied), len(closed)
        return result

    def fork(self, folder: Path) -> Nightly:
        """The same deployment from here on, in another folder (its own store and outbox)."""
        folder.mkdir(parents=True, exist_ok=True)
        if (self.folder / "alerts").exists():  # its outbox too: the open incidents go on in the fork
            shutil.copytree(self.folder / "alerts", folder / "alerts")
        other = Nightly.__new__(Nightly)
        other.folder, other.sample_size, other.settings = folder, self.sample_size, self.settings
        other.store, other.evidence = folder / "traces", self.evidence
        other.outbox = Outbox(folder / "alerts" / "outbox.jsonl")
        other.history = list(self.history)
        other.open = dict(self.open)
        return other


# -- scenarios -------------------------------------------------------------------------------------


# A weekly traffic mix: slice s0 (retrieved-citation rate 0.75, the others 0.90) carries 10 % of weekday
# and 40 % of weekend traffic, so the all-traffic rate is 4.5 points lower every weekend.
WEEKLY = dict(
    slices=4,
    per_slice=250,
    weekday_mix=(0.1, 0.3, 0.3, 0.3),
    weekend_mix=(0.4, 0.2, 0.2, 0.2),
    slice_valid=(0.75, 0.90, 0.90, 0.90),
)
QUIET = {
    "quiet-8x1000": (lambda: Traffic(jitter=0.1), 1000),
    "quiet-8x1000-shared": (lambda: Traffic(jitter=0.1, shared=True), 1000),
    "quiet-8x1000-steady": (lambda: Traffic(), 1000),
    "quiet-demo": (lambda: DemoTraffic(), 200),
    "quiet-weekly-mix": (lambda: Traffic(jitter=0.1, **WEEKLY), 1000),
}
DROPS = {
    "drop-all-5pt": dict(drop_slice=None, drop_points=0.05, within=1),
    "drop-slice-10pt": dict(drop_slice=3, drop_points=0.10, within=3),
    # A rare failure doubles: 2 % of traces are refused, then 4 % in one slice of 300.
    "drop-rare-2to4": dict(
        drop_slice=1,
        drop_points=0.02,
        within=7,
        drop_rate="refusal",
        metric="refusal_rate",
        traffic=dict(slices=4, per_slice=300, rates=Rates(refusal=0.02)),
    ),
}
# One aberrant night (the retrieved-citation rate in all traffic at half its 90 %, or 10 points lower),
# then the 5-point drop in all traffic 7 nights later: caught the same night although the aberrant night
# is still in both trailing windows?
AFTER_DIP = 7
DIPS = {
    "outage-then-drop-5pt": dict(dip_points=0.45),
    "dip-10pt-then-drop-5pt": dict(dip_points=0.10),
    "no-dip-then-drop-5pt": dict(dip_points=0.0),  # the control: the same nights without the bad one
}
# A new slice (s4, retrieved-citation rate 0.70) takes 20 % of the traffic from the fork on; no slice gets
# worse, the all-traffic rate falls by 4 points: does its alert say the traffic mix changed?
NEW_SLICE = dict(
    slices=5,
    per_slice=200,
    weekday_mix=(0.25, 0.25, 0.25, 0.25, 0.0),
    weekend_mix=(0.25, 0.25, 0.25, 0.25, 0.0),
    later_mix=(0.2, 0.2, 0.2, 0.2, 0.2),
    slice_valid=(0.90, 0.90, 0.90, 0.90, 0.70),
)


def quiet(name: str, nights: int, settings: DropSettings, workdir: Path) -> dict:
    make, sample_size = QUIET[name]
    traffic = make()
    folder = workdir / name
    folder.mkdir(parents=True)
    evidence = _evidence(workdir, traffic)
    nightly = Nightly(folder, evidence, sample_size, settings)
    start = time.perf_counter()
    judged = []
    for index in range(WARMUP + nights):
        night = nightly.night(index, traffic.day_lines(index))
        if index >= WARMUP:
            judged.append(night)
    seconds = time.perf_counter() - start
    alarms = [n for n in judged if n.alerts]
    by_type = {}
    for kind, weekend in (("weekend", True), ("weekday", False)):
        of_type = [n for n in judged if (date.fromisoformat(n.day).weekday() >= 5) == weekend]
        alarmed = sum(bool(n.alerts) for n in of_type)
        low, high = wilson(alarmed, len(of_type))
        share = alarmed / len(of_type)
        by_type[f"alerting_{kind}_nights_pct_95ci"] = [round(100 * x, 2) for x in (share, low, high)]
    return {
        "scenario": name,
        "nights": nights,
        "tests_per_night": round(float(np.mean([n.tested for n in judged])), 1),
        "alerting_nights": len(alarms),
        "alerting_nights_per_30": round(30 * len(alarms) / nights, 2),
        **by_type,
        "regression_posts": sum(n.opened for n in judged),
        "regression_posts_per_30": round(30 * sum(n.opened for n in judged) / nights, 2),
        "thread_replies": sum(n.replies for n in judged),
        "recoveries": sum(n.closed for n in judged),
        "each_test_alone_per_30": round(30 * sum(n.alone for n in judged) / nights, 2),
        "alarms": [(n.day, n.alerts) for n in alarms],
        "seconds_per_night": round(seconds / (WARMUP + nights), 3),
    }


def drops(name: str, history: str, replicates: int, settings: DropSettings, workdir: Path) -> dict:
    spec = DROPS[name]
    shape = spec.get("traffic", {})
    base = Traffic(jitter=0.1 if history == "jittered" else 0.0, **shape)
    folder = workdir / f"{name}-{history}"
    folder.mkdir(parents=True)
    nightly = Nightly(folder / "main", _evidence(workdir, base), base.slices * base.per_slice, settings)
    delays: list[int | None] = []
    within = spec["within"]
    metric = spec.get("metric", DROPPED)
    wanted = (
        f"{metric}@{'all traffic' if spec['drop_slice'] is None else 'slice=s' + str(spec['drop_slice'])}"
    )
    index = 0
    for fork_at in _fork_nights(replicates):
        while index < fork_at:
            nightly.night(index, base.day_lines(index))
            index += 1
        dropped = replace(
            base,
            drop_from=fork_at,
            drop_slice=spec["drop_slice"],
            drop_points=spec["drop_points"],
            drop_rate=spec.get("drop_rate", "valid"),
        )
        branch = nightly.fork(folder / f"fork-{fork_at}")
        delay = None
        for offset in range(max(3, within)):
            night = branch.night(fork_at + offset, dropped.day_lines(fork_at + offset))
            if night.posted == "regression" and wanted in night.alerts:
                delay = offset
                break
        shutil.rmtree(folder / f"fork-{fork_at}")
        delays.append(delay)
    detected = [d for d in delays if d is not None]
    caught = sum(d < within for d in detected)
    low, high = wilson(caught, replicates)
    return {
        "scenario": name,
        "history": history,
        "replicates": replicates,
        "wanted": wanted,
        "same_night": round(sum(d == 0 for d in detected) / replicates, 3),
        "within_2_nights": round(sum(d <= 1 for d in detected) / replicates, 3),
        "within_3_nights": round(sum(d <= 2 for d in detected) / replicates, 3),
        f"within_{within}_nights_95ci": [round(caught / replicates, 3), round(low, 3), round(high, 3)],
        "target": f"within {within} night(s) >= 0.8",
        "meets_target": caught / replicates >= 0.8,
        "mean_delay_nights": round(float(np.mean(detected)) + 1, 2) if detected else None,
    }


def after_dip(name: str, history: str, replicates: int, settings: DropSettings, workdir: Path) -> dict:
    spec = DIPS[name]
    base = Traffic(jitter=0.1) if history == "jittered" else Traffic()
    folder = workdir / f"{name}-{history}"
    folder.mkdir(parents=True)
    nightly = Nightly(folder / "main", _evidence(workdir, base), 1000, settings)
    wanted = f"{DROPPED}@all traffic"
    caught, dip_alerted, index = 0, 0, 0
    posts, recoveries, tidy = [], [], 0  # from the aberrant night to the night before the drop
    own_posts, own_recoveries, own_tidy = [], [], 0  # those about the aberrant rate itself
    for fork_at in _fork_nights(replicates):
        while index < fork_at:
            nightly.night(index, base.day_lines(index))
            index += 1
        drop_at = fork_at + AFTER_DIP
        traffic = replace(
            base, dip_at=fork_at, dip_points=spec["dip_points"], drop_from=drop_at, drop_points=0.05
        )
        branch = nightly.fork(folder / f"fork-{fork_at}")
        opened = closed = own_opened = own_closed = 0
        for night_index in range(fork_at, drop_at + 1):
            night = branch.night(night_index, traffic.day_lines(night_index))
            dip_alerted += night_index == fork_at and wanted in night.alerts
            if night_index < drop_at:
                opened, closed = opened + night.opened, closed + night.closed
                own_opened += sum(_about(keys) for keys in night.opened_about)
                own_closed += sum(_about(keys) for keys in night.closed_about)
        caught += wanted in night.alerts  # the drop's first night
        posts.append(opened)
        recoveries.append(closed)
        tidy += opened <= 1 and closed <= 1
        own_posts.append(own_opened)
        own_recoveries.append(own_closed)
        own_tidy += own_opened <= 1 and own_closed <= 1
        shutil.rmtree(folder / f"fork-{fork_at}")
    low, high = wilson(caught, replicates)
    tidy_low, tidy_high = wilson(tidy, replicates)
    return {
        "scenario": name,
        "history": history,
        "replicates": replicates,
        "wanted": wanted,
        "dip_night_alerted": round(dip_alerted / replicates, 3),
        "same_night": round(caught / replicates, 3),
        "same_night_95ci": [round(low, 3), round(high, 3)],
        "target": "same night >= 0.8",
        "meets_target": caught / replicates >= 0.8,
        # From the aberrant night to the night before the drop (7 nights): top-level regression
        # messages and recoveries, and the share of histories with at most one of each.
        "regression_posts_mean": round(float(np.mean(posts)), 2),
        "regression_posts_max": int(max(posts)),
        "recoveries_mean": round(float(np.mean(recoveries)), 2),
        "at_most_1_post_and_1_recovery_95ci": [round(x, 3) for x in (tidy / replicates, tidy_low, tidy_high)],
        # The same, counting only the messages about the aberrant rate (retrieved citations, any slice):
        # the others are false alarms of other rates in that week, as in the control.
        "own_posts_max": int(max(own_posts)),
        "own_recoveries_max": int(max(own_recoveries)),
        "own_at_most_1_post_and_1_recovery": round(own_tidy / replicates, 3),
    }


def _about(keys: list[str]) -> bool:
    """Is a message about the aberrant rate (``metric@slice`` keys of its incidents)?"""
    return any(key.split("@")[0] == DROPPED for key in keys)


def new_slice(name: str, history: str, replicates: int, settings: DropSettings, workdir: Path) -> dict:
    """A new, worse slice takes a fifth of the traffic: is the all-traffic alert said to be the mix's?"""
    base = Traffic(jitter=0.1 if history == "jittered" else 0.0, **NEW_SLICE)
    folder = workdir / f"{name}-{history}"
    folder.mkdir(parents=True)
    nightly = Nightly(folder / "main", _evidence(workdir, base), 1000, settings)
    wanted = f"{DROPPED}@all traffic"
    alerted = said = index = 0
    for fork_at in _fork_nights(replicates):
        while index < fork_at:
            nightly.night(index, base.day_lines(index))
            index += 1
        traffic = replace(base, drop_from=fork_at)
        branch = nightly.fork(folder / f"fork-{fork_at}")
        for offset in range(3):
            night = branch.night(fork_at + offset, traffic.day_lines(fork_at + offset))
            if wanted in night.alerts:
                alerted += 1
                said += any(
                    n.startswith(wanted) and "traffic mix changed: slice=s4 grew from" in n
                    for n in night.notes
                )
                break
        shutil.rmtree(folder / f"fork-{fork_at}")
    return {
        "scenario": name,
        "history": history,
        "replicates": replicates,
        "all_traffic_alerted_within_3_nights": round(alerted / replicates, 3),
        "of_which_say_mix_changed_naming_the_slice": round(said / alerted, 3) if alerted else None,
    }


def _fork_nights(replicates: int) -> Iterator[int]:
    return (WARMUP + 3 * k for k in range(replicates))


def _evidence(workdir: Path, traffic) -> Path:
    if isinstance(traffic, DemoTraffic):
        from ragspine_pipeline.demo.build import REGISTRY_FIELDS
        from ragspine_pipeline.demo.corpus import chunk_rows

        path = workdir / "demo-evidence.jsonl"
        path.write_text("".join(json.dumps({k: r[k] for k in REGISTRY_FIELDS}) + "\n" for r in chunk_rows()))
        return path
    return write_registry(workdir / "evidence.jsonl")


def _run(job: tuple) -> dict:
    kind, args, settings_json = job
    settings = DropSettings.model_validate_json(settings_json)
    with tempfile.TemporaryDirectory(prefix="drift-") as tmp:
        if kind == "quiet":
            return quiet(*args, settings=settings, workdir=Path(tmp))
        if kind == "after_dip":
            return after_dip(*args, settings=settings, workdir=Path(tmp))
        if kind == "new_slice":
            return new_slice(*args, settings=settings, workdir=Path(tmp))
        return drops(*args, settings=settings, workdir=Path(tmp))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nights", type=int, default=600, help="judged nights per quiet scenario")
    parser.add_argument("--replicates", type=int, default=100, help="forks per drop scenario and history")
    parser.add_argument("--only", nargs="*", help="scenario names to run (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="scenarios run in parallel processes")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="override drop-test settings, values in JSON (fdr=0.03, min_relative_change=null …)",
    )
    args = parser.parse_args()
    overrides = {name: json.loads(value) for name, value in (item.split("=", 1) for item in args.set)}
    settings = DropSettings.model_validate({**committed_config().production.model_dump(), **overrides})
    jobs = [("quiet", (name, args.nights), settings.model_dump_json()) for name in QUIET]
    jobs += [
        ("drops", (name, history, args.replicates), settings.model_dump_json())
        for name in DROPS
        for history in ("steady", "jittered")
    ]
    jobs += [
        ("after_dip", (name, history, args.replicates), settings.model_dump_json())
        for name in DIPS
        for history in ("steady", "jittered")
    ]
    jobs += [
        ("new_slice", ("new-slice-worse", history, args.replicates), settings.model_dump_json())
        for history in ("steady", "jittered")
    ]
    if args.only:
        jobs = [job for job in jobs if job[1][0] in args.only]
    print(f"settings: {settings.model_dump()}")
    cores = multiprocessing.cpu_count()
    print(f"machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}")
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        results = pool.map(_run, jobs, chunksize=1)
    for result in results:
        shown = {k: v for k, v in result.items() if k != "alarms"}
        print(json.dumps(shown))
        for day, alerts in result.get("alarms", []):
            print(f"    false alarm {day}: {', '.join(alerts)}")
    print(f"total {time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
