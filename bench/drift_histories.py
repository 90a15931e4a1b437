"""Scenarios of bench/bench_drift_alarms.py measured over independent histories (issue 45).

Each history has its own seed (``1000 + h``), its own first day (``FIRST`` + h mod 7 days, so a change
does not always start on the same weekday) and its own warm-up of ``WARMUP`` nights, which are summarised
and kept as history but never judged (a deployment after its backfill); then ``judged`` nights run through
:meth:`Nightly.judge` — the real ``drop_tests`` → ``drop_alert`` → ``Outbox.observe`` — and are measured.
A night's summary is drawn directly from the traffic's rates (``drift_synth``, the default) or from its
traces through the real sampling and scoring (``level="trace"``, ~0.3 s a night). Every change starts on
the first judged night (night ``WARMUP``). Traffic: 8 slices × 125 traces a night (all sampled) unless
said otherwise, the retrieved-citation rate 0.90, each rate's log-odds moving from night to night by an
independent N(0, 0.1²) in every slice.

Messages are counted from what the outbox queued (``drift_nightly.Part``): *own* ones are about the
changed rate's incident (``retrieved_citation_rate``), the others are every message of every rate.

* ``step-5pt``: all traffic 5 points lower (0.90 → 0.85) for 30 nights, then back; 37 nights judged.
  While it lasts: posts, replies and recoveries; after it: a recovery within 3 nights of its end?
  Target: exactly one post, no recovery while it lasts, a recovery within 3 nights of its end.
* ``creep-10pt``: 1 point lower a night down to −10, held until 30 nights from its start, then back;
  the same counts and target.
* ``mix-drop-3pt``: every slice 3 points lower while the worse slice (s0, 0.75; the others 0.90) grows
  from 12.5 % to 36 % of the traffic, 7 nights judged: is the all-traffic drop *reported as a drop*
  within 3 and within 7 nights — an alerting all-traffic test whose note is None or says
  ``DROP_PHRASE`` (not only "traffic mix changed"), or the rate at the usual mix alerting? (Also: in a
  message the outbox queued; by a slice; by either.) Target ≥ 0.8.
  ``mix-drop-3pt-control``: the same drop, no mix shift (what the traffic can show at all).
* ``mix-shrink-drop-4pt``: every slice 4 points lower while s0's share falls from 40 % to 10 % (the raw
  all-traffic rate rises a little): the same counts. ``mix-shrink-drop-4pt-control``: no mix shift.
* ``mix-only``: s0 grows from 12.5 % to 36 %, no slice changes; 30 nights judged: posts, replies,
  recoveries. Target: one incident, one post.
* ``slice-vanishes``: a good slice (25 % of the traffic) vanishes; 7 nights judged: the share of
  all-traffic alerts with the mix note, and of histories whose first such alert has it.
* ``outage-1n``, ``-2n``, ``-3n``: the rate at half in every slice for 1, 2 or 3 nights; every message
  of every rate from the first outage night through 7 nights later (8 nights judged). Target: ≤ 1 post
  and ≤ 1 recovery in ≥ 90 % of histories. Collateral: outage nights on which another rate alerted.
* ``quiet-iid``, ``quiet-ar1``, ``quiet-t3``: no change, 30 judged nights per history (40 × 30 = 1,200
  by default); night effects independent normal, AR(1) with φ 0.8 (stationary, the same marginal SD), or
  Student t with 3 df scaled to the same SD, per slice and rate (``-shared``: one effect a night per
  rate, shared by every slice). Alerting nights per 30 (one history's count): target ≤ 0.5.

A drop reported in a test's note need not be in a message: a rate already held by an open incident joins
it quietly, so ``queued_as_drop`` (a message the outbox queued carries the drop as a drop) can be lower
than ``all_traffic_as_drop`` (an alerting test says so).

Intervals are 95 %: Wilson over histories for shares, Student t over histories for means of counts.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import numpy as np
from drift_nightly import Night, SummaryNightly, TraceNightly
from drift_traffic import DROPPED, FIRST, Traffic, write_registry
from scipy.stats import t as student_t

from ragspine_pipeline.scoring.drop_settings import DropSettings
from ragspine_pipeline.scoring.stats import wilson

HISTORIES = 40  # independent histories per scenario (~17 min for all of them on 2 shared cores)
WARMUP = 31  # history nights: the variance window (28) and the three-night window need them
LASTING = 30  # nights a lasting drop lasts
SETTLE = 7  # nights judged after a lasting drop ends
WITHIN = 3  # a drop behind a mix shift: reported within this many nights (and within REPORT_NIGHTS)
REPORT_NIGHTS = 7  # nights judged of a drop behind a mix shift (it lasts)
AFTER_OUTAGE = 7  # an outage's messages are counted from its first night through this many nights later
AT = f"{DROPPED}@all traffic"
UM = f"{DROPPED}@all traffic at the usual mix"  # the rate at the usual mix: a drop of all traffic too
MIX_PHRASE = "traffic mix changed"
DROP_PHRASE = "the rate at the usual mix fell"  # a mix note that still reports a drop (issue 45, item 3)
WORSE = 0.75  # the worse slice's retrieved-citation rate (the others 0.90)


def _mix(worse_share: float, slices: int = 8) -> tuple[float, ...]:
    """Slice s0 (the worse one) at ``worse_share`` of the traffic, the others equal."""
    return (worse_share,) + ((1 - worse_share) / (slices - 1),) * (slices - 1)


def _mix_shift(before: float, after: float | None, points: float) -> dict:
    """8 slices, s0 at 0.75 (the others 0.90) and ``before`` of the traffic, ``after`` from the first
    judged night on (None: no shift), every slice ``points`` lower from then on."""
    return dict(
        weekday_mix=_mix(before),
        weekend_mix=_mix(before),
        later_mix=None if after is None else _mix(after),
        slice_valid=(WORSE,) + (0.90,) * 7,
        drop_from=WARMUP,
        drop_points=points,
    )


@dataclass(frozen=True)
class HistoryScenario:
    kind: str  # what is measured (MEASURES)
    traffic: dict  # Traffic fields besides the per-history seed and first day
    judged: int  # nights judged after the warm-up


STEP = dict(drop_from=WARMUP, drop_until=WARMUP + LASTING)
HISTORY_SCENARIOS = {
    # A 5-point drop of all traffic for 30 nights, then back.
    "step-5pt": HistoryScenario("lasting", dict(**STEP, drop_points=0.05), LASTING + SETTLE),
    # 1 point a night down to -10, held until 30 nights from its start, then back.
    "creep-10pt": HistoryScenario("lasting", dict(**STEP, drop_points=0.10, creep=0.01), LASTING + SETTLE),
    # Every slice -3 points while the worse slice grows from 12.5 % to 36 % of the traffic.
    "mix-drop-3pt": HistoryScenario("report", _mix_shift(0.125, 0.36, 0.03), REPORT_NIGHTS),
    "mix-drop-3pt-control": HistoryScenario("report", _mix_shift(0.125, None, 0.03), REPORT_NIGHTS),
    # Every slice -4 points while the worse slice's share falls from 40 % to 10 %.
    "mix-shrink-drop-4pt": HistoryScenario("report", _mix_shift(0.40, 0.10, 0.04), REPORT_NIGHTS),
    "mix-shrink-drop-4pt-control": HistoryScenario("report", _mix_shift(0.40, None, 0.04), REPORT_NIGHTS),
    # The worse slice grows from 12.5 % to 36 %; no slice changes.
    "mix-only": HistoryScenario("mix_only", _mix_shift(0.125, 0.36, 0.0), LASTING),
    # 4 slices of 250 a night, s3 (retrieved-citation rate 0.96, the others 0.80) vanishes: the others
    # keep their traffic, the all-traffic rate falls 4 points.
    "slice-vanishes": HistoryScenario(
        "vanish",
        dict(
            slices=4,
            per_slice=250,
            weekday_mix=(0.25,) * 4,
            weekend_mix=(0.25,) * 4,
            later_mix=(0.25, 0.25, 0.25, 0.0),
            slice_valid=(0.80, 0.80, 0.80, 0.96),
            drop_from=WARMUP,
        ),
        7,
    ),
    # The retrieved-citation rate at half its 0.90 in every slice for 1, 2 or 3 nights.
    **{
        f"outage-{nights}n": HistoryScenario(
            "outage", dict(dip_at=WARMUP, dip_points=0.45, dip_nights=nights), AFTER_OUTAGE + 1
        )
        for nights in (1, 2, 3)
    },
    # No change: independent, AR(1) (φ 0.8) and Student t3 night effects, all at SD 0.1 on the log-odds.
    "quiet-iid": HistoryScenario("quiet", {}, 30),
    "quiet-ar1": HistoryScenario("quiet", dict(effects="ar1", phi=0.8), 30),
    "quiet-t3": HistoryScenario("quiet", dict(effects="t3"), 30),
    # The same with one effect a night shared by every slice (a night worse everywhere).
    "quiet-iid-shared": HistoryScenario("quiet", dict(shared=True), 30),
    "quiet-ar1-shared": HistoryScenario("quiet", dict(effects="ar1", phi=0.8, shared=True), 30),
    "quiet-t3-shared": HistoryScenario("quiet", dict(effects="t3", shared=True), 30),
}


def history_traffic(name: str, h: int) -> Traffic:
    """History ``h`` of scenario ``name``."""
    spec = HISTORY_SCENARIOS[name]
    base = Traffic(jitter=0.1, **spec.traffic)
    return replace(base, seed=1000 + h, first=FIRST + timedelta(days=h % 7))


def run_history(name: str, h: int, level: str, settings: DropSettings) -> dict:
    """Warm-up and judged nights of history ``h`` of ``name``; its measures (:data:`MEASURES`)."""
    spec = HISTORY_SCENARIOS[name]
    traffic = history_traffic(name, h)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="drift-history-") as tmp:
        folder = Path(tmp) / "deployment"
        sample_size = traffic.slices * traffic.per_slice  # every trace of a night is sampled
        if level == "trace":
            evidence = write_registry(Path(tmp) / "evidence.jsonl")
            nightly = TraceNightly(folder, evidence, sample_size, settings)
        else:
            nightly = SummaryNightly(folder, settings, sample_size)
        for index in range(WARMUP):
            nightly.remember(nightly.summary(index, traffic))
        nights = [nightly.night(index, traffic) for index in range(WARMUP, WARMUP + spec.judged)]
    measured = MEASURES[spec.kind](nights, traffic, spec)
    return {"scenario": name, "history": h, **measured, "seconds": round(time.perf_counter() - start, 2)}


# -- what one history shows ------------------------------------------------------------------------


def _own(key: str) -> bool:
    return key.split("@")[0] == DROPPED


def _messages(nights: list[Night]) -> dict:
    """Every message of these nights (all rates), and those about the dropped rate's incident."""
    return {
        "posts": sum(n.opened for n in nights),
        "replies": sum(n.replies for n in nights),
        "recoveries": sum(n.closed for n in nights),
        "own_posts": sum(n.about(DROPPED, "post") for n in nights),
        "own_replies": sum(n.about(DROPPED, "reply") for n in nights),
        "own_recoveries": sum(n.about(DROPPED, "recovery") for n in nights),
    }


def _first(flags: list[bool]) -> int | None:
    return next((i for i, flag in enumerate(flags) if flag), None)


def _lasting(nights: list[Night], traffic: Traffic, spec: HistoryScenario) -> dict:
    lasts = traffic.drop_until - traffic.drop_from
    during, after = nights[:lasts], nights[lasts:]
    is_open = False
    for n in during:
        for part in n.parts:
            if DROPPED in part.incidents and part.kind in ("post", "recovery"):
                is_open = part.kind == "post"
    return {
        **_messages(during),
        "alert_nights": sum(any(_own(k) for k in n.alerts) for n in during),
        "first_alert": _first([any(_own(k) for k in n.alerts) for n in during]),
        "open_at_end": is_open,
        "recovery_after_end": _first([n.about(DROPPED, "recovery") > 0 for n in after]),
        "posts_after_end": sum(n.about(DROPPED, "post") for n in after),
    }


def _as_drop(note: str | None) -> bool:
    return note is None or DROP_PHRASE in note


def _report(nights: list[Night], traffic: Traffic, spec: HistoryScenario) -> dict:
    at = [AT in n.noted or UM in n.noted for n in nights]
    as_drop = [(AT in n.noted and _as_drop(n.noted[AT])) or UM in n.noted for n in nights]
    queued = [
        any(
            p.kind != "recovery" and ((AT in p.drops and _as_drop(p.drops[AT])) or UM in p.drops)
            for p in n.parts
        )
        for n in nights
    ]
    slices = [any(k.startswith(f"{DROPPED}@") and k not in (AT, UM) for k in n.alerts) for n in nights]
    return {
        "all_traffic_alert_nights": sum(at),
        "as_drop_nights": sum(as_drop),
        "all_traffic_as_drop": _first(as_drop),
        "queued_as_drop": _first(queued),
        "slices": _first(slices),
        "notes": [n.noted.get(AT, "-") for n in nights],
    }


def _mix_only(nights: list[Night], traffic: Traffic, spec: HistoryScenario) -> dict:
    return {
        **_messages(nights),
        "all_traffic_alert_nights": sum(AT in n.noted for n in nights),
        "mix_noted_nights": sum(MIX_PHRASE in (n.noted.get(AT) or "") for n in nights),
    }


def _vanish(nights: list[Night], traffic: Traffic, spec: HistoryScenario) -> dict:
    notes = [n.noted[AT] or "" for n in nights if AT in n.noted]
    return {
        "all_traffic_alert_nights": len(notes),
        "mix_noted_nights": sum(MIX_PHRASE in note for note in notes),
        "first_alert_noted": (MIX_PHRASE in notes[0]) if notes else None,
        "first_alert_names_slice": ("slice=s3" in notes[0]) if notes else None,
        "notes": notes,
    }


def _outage(nights: list[Night], traffic: Traffic, spec: HistoryScenario) -> dict:
    bad = nights[: traffic.dip_nights]
    return {
        **_messages(nights),
        "outage_alerted": any(_own(k) for k in bad[0].alerts),
        "collateral_nights": sum(any(not _own(k) for k in n.alerts) for n in bad),
        "collateral": sorted({k for n in bad for k in n.alerts if not _own(k)}),
    }


def _quiet(nights: list[Night], traffic: Traffic, spec: HistoryScenario) -> dict:
    return {
        **_messages(nights),
        "alert_nights": sum(bool(n.alerts) for n in nights),
        "tests_per_night": round(float(np.mean([n.tested for n in nights])), 1),
        "alarms": [(n.day, [f"{k} ({n.windows[k]} n)" for k in n.alerts]) for n in nights if n.alerts],
        "alerts_by_window": dict(Counter(w for n in nights for w in n.windows.values())),
    }


MEASURES = {
    "lasting": _lasting,
    "report": _report,
    "mix_only": _mix_only,
    "vanish": _vanish,
    "outage": _outage,
    "quiet": _quiet,
}


# -- what the histories show -----------------------------------------------------------------------


def share(k: int, n: int) -> list:
    """``[k/n, low, high]`` with the 95 % Wilson interval (None without histories)."""
    if not n:
        return [None, None, None]
    low, high = wilson(k, n)
    return [round(k / n, 3), round(low, 3), round(high, 3)]


def mean_ci(values: list[float]) -> list:
    """``[mean, low, high]``: the mean over histories with its 95 % Student t interval."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return [round(float(x.mean()), 3) if len(x) else None, None, None]
    half = float(student_t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return [round(float(x.mean()), 3), round(float(x.mean()) - half, 3), round(float(x.mean()) + half, 3)]


def _within(offset: int | None, nights: int) -> bool:
    return offset is not None and offset < nights


def _count(rows: list[dict], test) -> list:
    return share(sum(bool(test(r)) for r in rows), len(rows))


def _summarise_lasting(rows: list[dict]) -> dict:
    return {
        "own_posts_mean_95ci": mean_ci([r["own_posts"] for r in rows]),
        "own_replies_mean_95ci": mean_ci([r["own_replies"] for r in rows]),
        "own_recoveries_mean_95ci": mean_ci([r["own_recoveries"] for r in rows]),
        "exactly_one_post": _count(rows, lambda r: r["own_posts"] == 1),
        "no_recovery_before_end": _count(rows, lambda r: r["own_recoveries"] == 0),
        "recovery_within_3_of_end": _count(rows, lambda r: _within(r["recovery_after_end"], 3)),
        "target_all_three": _count(
            rows,
            lambda r: (
                r["own_posts"] == 1 and r["own_recoveries"] == 0 and _within(r["recovery_after_end"], 3)
            ),
        ),
        "open_at_end": _count(rows, lambda r: r["open_at_end"]),
        "posts_after_end_mean": round(float(np.mean([r["posts_after_end"] for r in rows])), 2),
        "alert_nights_mean": round(float(np.mean([r["alert_nights"] for r in rows])), 1),
        "first_alert_night_mean": _mean_known([r["first_alert"] for r in rows]),
        "all_messages_posts_replies_recoveries_mean": [
            round(float(np.mean([r[k] for r in rows])), 2) for k in ("posts", "replies", "recoveries")
        ],
    }


def _mean_known(values: list) -> float | None:
    known = [v + 1 for v in values if v is not None]  # 1: the first night of the change
    return round(float(np.mean(known)), 2) if known else None


def _summarise_report(rows: list[dict]) -> dict:
    def within(nights: int, *keys: str):
        return _count(rows, lambda r: any(r[k] is not None and r[k] < nights for k in keys))

    out = {}
    for nights in (WITHIN, REPORT_NIGHTS):
        out |= {
            f"all_traffic_as_drop_within_{nights}": within(nights, "all_traffic_as_drop"),
            f"queued_as_drop_within_{nights}": within(nights, "queued_as_drop"),
            f"slice_alert_within_{nights}": within(nights, "slices"),
            f"reported_within_{nights}_all_traffic_or_slices": within(
                nights, "all_traffic_as_drop", "slices"
            ),
        }
    out["all_traffic_alerting_nights"] = sum(r["all_traffic_alert_nights"] for r in rows)
    out["of_which_as_drop"] = sum(r["as_drop_nights"] for r in rows)
    return out


def _summarise_mix_only(rows: list[dict]) -> dict:
    return {
        "exactly_one_post": _count(rows, lambda r: r["own_posts"] == 1),
        "at_most_one_post": _count(rows, lambda r: r["own_posts"] <= 1),
        "own_posts_mean_95ci": mean_ci([r["own_posts"] for r in rows]),
        "own_recoveries_mean_95ci": mean_ci([r["own_recoveries"] for r in rows]),
        "own_replies_mean_95ci": mean_ci([r["own_replies"] for r in rows]),
        "all_traffic_alerting_nights_mean": round(
            float(np.mean([r["all_traffic_alert_nights"] for r in rows])), 1
        ),
        "alerting_nights_with_mix_note": [
            sum(r["mix_noted_nights"] for r in rows),
            sum(r["all_traffic_alert_nights"] for r in rows),
        ],
    }


def _summarise_vanish(rows: list[dict]) -> dict:
    alerted = [r for r in rows if r["first_alert_noted"] is not None]
    return {
        "all_traffic_alerted": _count(rows, lambda r: r["all_traffic_alert_nights"] > 0),
        "alerts_with_mix_note": [
            sum(r["mix_noted_nights"] for r in rows),
            sum(r["all_traffic_alert_nights"] for r in rows),
        ],
        "first_alert_with_mix_note": _count(alerted, lambda r: r["first_alert_noted"]),
        "first_alert_names_the_slice": _count(alerted, lambda r: r["first_alert_names_slice"]),
    }


def _summarise_outage(rows: list[dict], nights: int) -> dict:
    collateral = sum(r["collateral_nights"] for r in rows)
    return {
        "at_most_1_post_and_1_recovery": _count(rows, lambda r: r["posts"] <= 1 and r["recoveries"] <= 1),
        "own_at_most_1_post_and_1_recovery": _count(
            rows, lambda r: r["own_posts"] <= 1 and r["own_recoveries"] <= 1
        ),
        "posts_mean_95ci": mean_ci([r["posts"] for r in rows]),
        "recoveries_mean_95ci": mean_ci([r["recoveries"] for r in rows]),
        "replies_mean": round(float(np.mean([r["replies"] for r in rows])), 2),
        "outage_alerted_first_night": _count(rows, lambda r: r["outage_alerted"]),
        # Nights pooled over histories (a history's outage nights are not independent of each other).
        "collateral_outage_nights": [collateral, nights * len(rows), *share(collateral, nights * len(rows))],
        "histories_with_collateral": _count(rows, lambda r: r["collateral_nights"] > 0),
    }


def _summarise_quiet(rows: list[dict], judged: int) -> dict:
    per_30 = 30 / judged
    windows = (Counter(r["alerts_by_window"]) for r in rows)
    return {
        "alerting_nights_per_30_95ci": mean_ci([r["alert_nights"] * per_30 for r in rows]),
        "alerting_nights": [sum(r["alert_nights"] for r in rows), judged * len(rows)],
        "posts_per_30_95ci": mean_ci([r["posts"] * per_30 for r in rows]),
        "replies_recoveries": [sum(r["replies"] for r in rows), sum(r["recoveries"] for r in rows)],
        "tests_per_night": round(float(np.mean([r["tests_per_night"] for r in rows])), 1),
        # The alerting tests (one per rate and slice a night: its smallest q) by window, in nights.
        "alerts_by_window": dict(sorted(sum(windows, Counter()).items())),
    }


def summarise(name: str, rows: list[dict], level: str) -> dict:
    """The figures of scenario ``name`` over its histories' ``rows``."""
    spec = HISTORY_SCENARIOS[name]
    rows = sorted(rows, key=lambda r: r["history"])
    if spec.kind == "lasting":
        figures = _summarise_lasting(rows)
    elif spec.kind == "report":
        figures = _summarise_report(rows)
    elif spec.kind == "mix_only":
        figures = _summarise_mix_only(rows)
    elif spec.kind == "vanish":
        figures = _summarise_vanish(rows)
    elif spec.kind == "outage":
        figures = _summarise_outage(rows, spec.traffic["dip_nights"])
    else:
        figures = _summarise_quiet(rows, spec.judged)
    return {
        "scenario": name,
        "level": level,
        "histories": len(rows),
        "judged_nights_per_history": spec.judged,
        **figures,
        "seconds": round(sum(r["seconds"] for r in rows), 1),
    }
