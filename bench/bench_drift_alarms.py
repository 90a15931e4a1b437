"""Benchmark: false alarms and power of the nightly drop tests, through the real nightly path (issues 14,
35 and 45).

    python bench/bench_drift_alarms.py [--only NAME|GROUP ...] [--jobs 2] [--set fdr=0.03 ...] [--json F]
                                       [--nights 600] [--replicates 100]      # trace-level scenarios
                                       [--histories 20] [--level summary]     # scenarios over histories

Groups: ``trace-level`` (the scenarios below, one history each, forked), ``histories`` (issue 45's
scenarios over independent histories: ``drift_histories``, whose docstring says what each measures),
``crosscheck`` (``quiet-8x1000`` through both paths below, ``--nights`` judged nights each). Default: all.

A night is made in one of two ways and judged in one (``drift_nightly.Nightly.judge``):

* trace level: the night's traces are written to a local trace store (``dt=YYYY-MM-DD/part-00000.jsonl``)
  and summarised as the nightly job does, ``sample_day`` (the seeded sample), ``load_traces``,
  ``production_metrics`` with the evidence registry (~0.3 s a night);
* summary level: the daily summary is drawn directly from the same traffic's rates (``drift_synth``:
  binomial counts per slice and rate, claims clustered in answers → ``effective_n``), with the same night
  effects, in the same JSON shape (~0.05 s a night, nearly all of it the drop tests).

Judging is the real path: ``drop_tests`` against the earlier nights' summaries (settings from the
packaged gates config), the production alert (``alerts.nightly.drop_alert``) and ``Outbox.observe``; the
parts the outbox queues are counted as Slack shows them: *posts* (top-level regression messages, an
incident opens), *replies* in an open incident's thread, *recoveries* (an incident closes). Nothing is
mocked; only the traffic (or, at summary level, its sampling) is simulated.

Trace-level scenarios:

Quiet scenarios (nothing changes; the first 31 nights are history, judged but never counted):

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
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from drift_histories import HISTORIES, HISTORY_SCENARIOS, run_history, summarise  # noqa: E402
from drift_nightly import Night, Nightly, SummaryNightly, TraceNightly  # noqa: E402, F401
from drift_traffic import (  # noqa: E402, F401
    DROPPED,
    FIRST,
    SEED,
    DemoTraffic,
    Rates,
    Traffic,
    write_registry,
)

from ragspine_pipeline.decision.config import load_config  # noqa: E402
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS  # noqa: E402
from ragspine_pipeline.defs.resources import METRIC_SCOPE, packaged_gates  # noqa: E402
from ragspine_pipeline.scoring.drop_settings import WORSE_WHEN, DropSettings  # noqa: E402
from ragspine_pipeline.scoring.stats import wilson  # noqa: E402

WARMUP = 31  # history nights: the variance window (28) and the three-night window need them


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


def quiet(name: str, nights: int, level: str, settings: DropSettings, workdir: Path) -> dict:
    make, sample_size = QUIET[name]
    traffic = make()
    folder = workdir / name
    folder.mkdir(parents=True)
    if level == "summary":
        nightly = SummaryNightly(folder, settings, sample_size)
    else:
        nightly = TraceNightly(folder, _evidence(workdir, traffic), sample_size, settings)
    start = time.perf_counter()
    judged, summaries = [], []
    for index in range(WARMUP + nights):
        summary = nightly.summary(index, traffic)
        night = nightly.judge(summary, index)
        if index >= WARMUP:
            judged.append(night)
            summaries.append(summary)
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
        "level": level,
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
        "summaries": summary_statistics(summaries),
    }


def summary_statistics(summaries: list[dict]) -> dict:
    """Per rate over the nights: the all-traffic value's mean and SD, its mean n (and effective n), and the
    slices' value SD (averaged over slices): what the trace-level and summary-level paths must agree on."""
    out = {}
    for metric in WORSE_WHEN:
        entries = [s["metrics"][metric] for s in summaries]
        values = np.array([e["rate"] if "rate" in e else e["value"] for e in entries], dtype=float)
        by_slice: dict[str, list[float]] = {}
        for s in summaries:  # the first dimension the summaries slice by ("slice", "workflow", …)
            dimension = next(iter(s["slices"]), None)
            for value, entry in (s["slices"][dimension] if dimension else {}).items():
                e = entry["metrics"][metric]
                by_slice.setdefault(value, []).append(e["rate"] if "rate" in e else e["value"])
        row = {
            "mean": round(float(np.nanmean(values)), 4),
            "sd": round(float(np.nanstd(values, ddof=1)), 4),
            "n": round(float(np.mean([e["n"] for e in entries])), 1),
            "slice_sd": round(
                float(np.mean([np.nanstd(np.array(v, dtype=float), ddof=1) for v in by_slice.values()])), 4
            )
            if by_slice
            else None,
        }
        if "effective_n" in entries[0]:
            row["effective_n"] = round(float(np.mean([e["effective_n"] for e in entries])), 1)
        out[metric] = row
    return out


def drops(name: str, history: str, replicates: int, settings: DropSettings, workdir: Path) -> dict:
    spec = DROPS[name]
    shape = spec.get("traffic", {})
    base = Traffic(jitter=0.1 if history == "jittered" else 0.0, **shape)
    folder = workdir / f"{name}-{history}"
    folder.mkdir(parents=True)
    nightly = TraceNightly(folder / "main", _evidence(workdir, base), base.slices * base.per_slice, settings)
    delays: list[int | None] = []
    within = spec["within"]
    metric = spec.get("metric", DROPPED)
    wanted = (
        f"{metric}@{'all traffic' if spec['drop_slice'] is None else 'slice=s' + str(spec['drop_slice'])}"
    )
    index = 0
    for fork_at in _fork_nights(replicates):
        while index < fork_at:
            nightly.night(index, base)
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
            night = branch.night(fork_at + offset, dropped)
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
    nightly = TraceNightly(folder / "main", _evidence(workdir, base), 1000, settings)
    wanted = f"{DROPPED}@all traffic"
    caught, dip_alerted, index = 0, 0, 0
    posts, recoveries, tidy = [], [], 0  # from the aberrant night to the night before the drop
    own_posts, own_recoveries, own_tidy = [], [], 0  # those about the aberrant rate itself
    for fork_at in _fork_nights(replicates):
        while index < fork_at:
            nightly.night(index, base)
            index += 1
        drop_at = fork_at + AFTER_DIP
        traffic = replace(
            base, dip_at=fork_at, dip_points=spec["dip_points"], drop_from=drop_at, drop_points=0.05
        )
        branch = nightly.fork(folder / f"fork-{fork_at}")
        opened = closed = own_opened = own_closed = 0
        for night_index in range(fork_at, drop_at + 1):
            night = branch.night(night_index, traffic)
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
    nightly = TraceNightly(folder / "main", _evidence(workdir, base), 1000, settings)
    wanted = f"{DROPPED}@all traffic"
    alerted = said = index = 0
    for fork_at in _fork_nights(replicates):
        while index < fork_at:
            nightly.night(index, base)
            index += 1
        traffic = replace(base, drop_from=fork_at)
        branch = nightly.fork(folder / f"fork-{fork_at}")
        for offset in range(3):
            night = branch.night(fork_at + offset, traffic)
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
    if kind == "history":
        return run_history(*args, settings=settings)
    with tempfile.TemporaryDirectory(prefix="drift-") as tmp:
        if kind == "quiet":
            return quiet(*args, settings=settings, workdir=Path(tmp))
        if kind == "after_dip":
            return after_dip(*args, settings=settings, workdir=Path(tmp))
        if kind == "new_slice":
            return new_slice(*args, settings=settings, workdir=Path(tmp))
        return drops(*args, settings=settings, workdir=Path(tmp))


# Names --only also takes: every trace-level scenario, every scenario over independent histories, and the
# cross-check (quiet-8x1000 through both paths).
GROUPS = ("trace-level", "histories", "crosscheck")


def _jobs(args: argparse.Namespace, settings: str) -> list[tuple]:
    """The jobs ``--only`` selects, the longest first."""
    only = set(args.only or GROUPS)
    unknown = only - {*GROUPS, *QUIET, *DROPS, *DIPS, "new-slice-worse", *HISTORY_SCENARIOS}
    if unknown:
        raise SystemExit(f"unknown scenario(s) {', '.join(sorted(unknown))}; see --help")
    trace_level = "trace-level" in only
    jobs = [
        ("quiet", (name, args.nights, "trace"), settings)
        for name in QUIET
        if trace_level or name in only or (name == "quiet-8x1000" and "crosscheck" in only)
    ]
    jobs += [
        (kind, (name, history, args.replicates), settings)
        for kind, names in (("drops", DROPS), ("after_dip", DIPS), ("new_slice", ["new-slice-worse"]))
        for name in names
        for history in ("steady", "jittered")
        if trace_level or name in only
    ]
    if "crosscheck" in only:
        jobs.append(("quiet", ("quiet-8x1000", args.nights, "summary"), settings))
    jobs += [
        ("history", (name, h, args.level), settings)
        for name in HISTORY_SCENARIOS
        if "histories" in only or name in only
        for h in range(args.histories)
    ]
    return jobs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nights", type=int, default=600, help="judged nights per quiet scenario")
    parser.add_argument("--replicates", type=int, default=100, help="forks per drop scenario and history")
    parser.add_argument(
        "--histories", type=int, default=HISTORIES, help="independent histories per history scenario"
    )
    parser.add_argument(
        "--level",
        choices=("summary", "trace"),
        default="summary",
        help="history scenarios: nights drawn as daily summaries (default) or as traces, sampled and scored",
    )
    parser.add_argument(
        "--only", nargs="*", help=f"scenario names or groups ({', '.join(GROUPS)}) to run (default: all)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="jobs run in parallel processes")
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
    # The demo's drop-test settings: its gates config (RAGSPINE_GATES_CONFIG, else the packaged one).
    committed = load_config(
        os.environ.get("RAGSPINE_GATES_CONFIG") or packaged_gates(), KNOWN_METRICS, METRIC_SCOPE
    )
    settings = DropSettings.model_validate({**committed.production.model_dump(), **overrides})
    jobs = _jobs(args, settings.model_dump_json())
    print(f"settings: {settings.model_dump()}")
    cores = multiprocessing.cpu_count()
    print(f"machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}")
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        done = pool.map(_run, jobs, chunksize=1)
    results = [r for job, r in zip(jobs, done, strict=True) if job[0] != "history"]
    rows: dict[str, list[dict]] = {}
    for job, r in zip(jobs, done, strict=True):
        if job[0] == "history":
            rows.setdefault(r["scenario"], []).append(r)
    results += [{**summarise(name, of, args.level), "rows": of} for name, of in rows.items()]
    for result in results:
        shown = {k: v for k, v in result.items() if k not in ("alarms", "rows", "summaries")}
        print(json.dumps(shown))
        for day, alerts in result.get("alarms", []):
            print(f"    false alarm {day}: {', '.join(alerts)}")
    _print_crosscheck(results)
    print(f"total {time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _print_crosscheck(results: list[dict]) -> None:
    """quiet-8x1000 through both paths, side by side (when both ran)."""
    both = {r["level"]: r for r in results if r["scenario"] == "quiet-8x1000"}
    if set(both) != {"trace", "summary"}:
        return
    trace, summary = both["trace"], both["summary"]
    print("cross-check, quiet-8x1000 (trace-level | summary-level):")
    for key in ("tests_per_night", "alerting_nights_per_30", "regression_posts_per_30", "seconds_per_night"):
        print(f"    {key}: {trace[key]} | {summary[key]}")
    for metric, row in trace["summaries"].items():
        print(f"    {metric}: {row} | {summary['summaries'][metric]}")


if __name__ == "__main__":
    sys.exit(main())
