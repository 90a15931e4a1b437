"""Ratcheting baselines: per evaluation mode, the best metric values a passing run has reached.

The file's format and how it is read: ``decision.baseline_file`` (its names are re-exported here).

Contract:

* ``compare`` checks only the metrics the baseline lists, on unrounded values. A higher-is-better
  metric regresses when it is strictly below its baseline; a metric in ``gates.LOWER_IS_BETTER``
  when it is strictly above; the fabrication count when it is higher. A value that cannot be shown
  to be at least as good (NaN) is a regression. Listed metrics the run did not measure (absent or
  None; ``fabrication_count`` when the baseline has a count and the run none) are reported as
  unmeasured, never as failures.
* ``promote`` only ever tightens: every listed metric becomes the better of its old and current
  value, new metrics are added, unmeasured ones are kept, the fabrication count becomes the lower
  known count. A failing run, or a file that cannot be read, leaves the file byte-for-byte untouched.
  The write is atomic (temporary file in the same directory, then ``os.replace``); the other modes
  are written back exactly as they were read. A promotion keeps the entry's ``history``.
* :func:`set_by_hand` is the one way to move a value down (or up) on purpose: under the same lock, it
  sets one listed value and appends who, when, why and the previous value to the entry's ``history``.
  A comparison with the entry carries each change still standing (``Comparison.changes``), which every
  report and decision shows as a warning (:func:`change_warnings`).
* Every read–compare–write is one :func:`locked_update` of a ``files.VersionedFile`` (a local file
  under an exclusive lock, or an S3 object written with conditional writes): the comparison that
  decides a run and the ratchet that follows it see the value current at that moment, so concurrent
  promotions can never lower a value, whatever their interleaving.
* :func:`paired_promoted` is the paired test's promotion: it starts, fills or restarts the pool as
  ``decision.paired.next_pool`` says, or leaves the entry as it is. Starting or restarting the pool also
  tightens the metrics (:func:`ratcheted`); a run joining the pool changes only the pool and the last
  run (``cases``, ``run``, ``updated_at``). The one run that changes the file although blocked: a run of
  the pool's founding release that the paired test alone blocked joins the pool, recorded in
  ``pool_history``; nothing else of the entry changes (it promoted nothing).
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from ragspine_pipeline.decision.baseline_file import (
    COUNT_METRIC,
    COUNT_METRICS,
    DEFAULT_MODE,
    FABRICATION,
    TIMESTAMP_FORMAT,
    BaselineEntry,
    BaselineError,
    check_names,
    entry_json,
    file_scope,
    is_ragspine_file,
    load_baseline,
    parse_baseline,
    read_baseline,
)
from ragspine_pipeline.decision.baseline_history import BaselineChange, change_sentence
from ragspine_pipeline.decision.gates import LOWER_IS_BETTER
from ragspine_pipeline.decision.paired import PairedSettings, Pool, next_pool
from ragspine_pipeline.decision.ragspine_baseline import is_ragspine_shaped, ragspine_entry, ragspine_names
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import LockedFile, VersionedFile
from ragspine_pipeline.jsonvalues import finite
from ragspine_pipeline.metrics import Scope

__all__ = [  # the file's names, re-exported: callers import them from here
    "COUNT_METRIC",
    "COUNT_METRICS",
    "DEFAULT_MODE",
    "FABRICATION",
    "TIMESTAMP_FORMAT",
    "BaselineEntry",
    "BaselineError",
    "Comparison",
    "Regression",
    "better",
    "change_warnings",
    "compare",
    "file_scope",
    "is_at_least_as_good",
    "is_ragspine_file",
    "load_baseline",
    "locked_update",
    "paired_promoted",
    "parse_baseline",
    "promote",
    "ratcheted",
    "read_baseline",
    "set_by_hand",
]


@dataclass(frozen=True)
class Regression:
    metric: str  # "fabrication_count" for the count
    baseline: float
    current: float
    delta: float  # current - baseline, unrounded


@dataclass(frozen=True)
class Comparison:
    regressions: list[Regression]
    unmeasured: list[str]  # listed in the baseline, not measured by the run: reported, not failing
    paired: dict | None = None  # the paired test's result (``decision.paired``) when it decided
    changes: tuple[BaselineChange, ...] = ()  # values of the entry set by hand and still standing

    @property
    def passed(self) -> bool:
        return not self.regressions


# --- direction -------------------------------------------------------------------------------------


def is_at_least_as_good(metric: str, current: float, baseline: float) -> bool:
    """True when ``current`` does not regress from ``baseline`` (equal passes; NaN never does)."""
    return current <= baseline if metric in LOWER_IS_BETTER else current >= baseline


def better(metric: str, old: float, current: float) -> float:
    """The better of two finite values for ``metric``."""
    return min(old, current) if metric in LOWER_IS_BETTER else max(old, current)


# --- compare ---------------------------------------------------------------------------------------


def compare(
    entry: BaselineEntry | None, metrics: Mapping[str, float], fabrication_count: int | None = None
) -> Comparison:
    """The run's metrics against a baseline entry; ``entry=None`` checks nothing."""
    if entry is None:
        return Comparison([], [])
    regressions: list[Regression] = []
    unmeasured: list[str] = []
    for name, base in entry.metrics.items():
        current = metrics.get(name)
        if current is None:
            unmeasured.append(name)
        elif not is_at_least_as_good(name, current, base):
            regressions.append(Regression(name, base, current, current - base))
    if entry.fabrication_count is not None:
        if fabrication_count is None:
            unmeasured.append(FABRICATION)
        elif fabrication_count > entry.fabrication_count:
            base_count, count = float(entry.fabrication_count), float(fabrication_count)
            regressions.append(Regression(FABRICATION, base_count, count, count - base_count))
    return Comparison(regressions, unmeasured, changes=tuple(entry.standing_changes()))


def change_warnings(comparison: Comparison | None) -> list[str]:
    """One warning line per value of the compared entry set by hand and still standing."""
    return [] if comparison is None else [change_sentence(change) for change in comparison.changes]


# --- promote ---------------------------------------------------------------------------------------


def locked_update(
    store: VersionedFile | str | Path,
    mode: str,
    known: Iterable[str] | None,
    change: Callable[[BaselineEntry | None], BaselineEntry | None],
    scope: Scope = Scope.GOLDEN,
) -> BaselineEntry | None:
    """Read the baseline with no other update in between, call ``change`` with ``mode``'s entry (None
    when there is none) and write the entry it returns (None: write nothing); return the entry the
    file holds for ``mode`` afterwards.

    ``change`` is where a run is compared with the baseline and, if it ships, ratcheted: it sees the
    value that is current when its result is written. It may run more than once (an S3 store retries
    after a conflicting write), so it must only depend on its argument. Other modes are kept as read.
    ``known``: the metric names a baseline may list (None: not checked); ``scope``: where its names are
    read (``decision.gates.canonical_metric``).
    """
    store = LockedFile(store, "baseline") if isinstance(store, (str, Path)) else store
    known = None if known is None else list(known)
    after: dict[str, BaselineEntry | None] = {}

    def update(text: str | None) -> str | None:
        raw, entries = parse_baseline(text, store.name, scope)
        check_names(store.name, entries, known)
        old = entries.get(mode)
        new = change(old)
        after["entry"] = old if new is None else new
        if new is None:
            return None
        if is_ragspine_shaped(raw):  # RAGSpine's shape: its keys, its names, its order, no final newline
            main = ragspine_names(scope)
            entry = ragspine_entry(entry_json(new, lambda metric: main.get(metric, metric)))
            return json.dumps({**raw, mode: entry}, indent=2, ensure_ascii=False, allow_nan=False)
        raw = {**raw, mode: entry_json(new)}
        return (
            json.dumps({key: raw[key] for key in sorted(raw)}, indent=2, ensure_ascii=False, allow_nan=False)
            + "\n"
        )

    store.update(update)
    return after["entry"]


def ratcheted(
    old: BaselineEntry | None,
    metrics: Mapping[str, float],
    *,
    fabrication_count: int | None = None,
    n_cases: int | None = None,
    run: str | None = None,
    now: datetime | None = None,
    cases: Mapping[str, bool] | None = None,
    pool: Pool | None = None,
) -> BaselineEntry:
    """``old`` tightened with a passing run's values: every listed metric the better of old and current,
    new ones added, unmeasured ones kept, the lower known fabrication count; ``cases`` and ``pool``
    replace the recorded per-case outcomes and reference pool when given; the history of values set by
    hand is kept."""
    current = _checked_current(metrics)
    fabrication_count = _checked_count(FABRICATION, fabrication_count)
    n_cases = _checked_count("n_cases", n_cases)
    old = old or BaselineEntry(metrics={})
    return BaselineEntry(
        metrics=_ratchet(old.metrics, current),
        fabrication_count=_lower_known(old.fabrication_count, fabrication_count),
        n_cases=old.n_cases if n_cases is None else n_cases,
        updated_at=_timestamp(now),
        run=old.run if run is None else run,
        cases=old.cases if cases is None else dict(cases),
        history=old.history,
        pool=old.pool if pool is None else pool,
    )


def paired_promoted(
    old: BaselineEntry | None,
    metrics: Mapping[str, float],
    *,
    cases: Mapping[str, bool],
    paired: Mapping | None,
    settings: PairedSettings | None = None,
    fabrication_count: int | None = None,
    n_cases: int | None = None,
    run: str | None = None,
    now: datetime | None = None,
    release: str | None = None,
) -> BaselineEntry | None:
    """The entry a run leaves under the paired test (None: leave it as it is).

    ``cases``: the run's ``{case id: passed}``; ``paired``: its comparison with ``old``'s reference
    (``PairedComparison.to_dict``; None when there was none). The pool becomes what
    ``decision.paired.next_pool`` says: started or restarted from this run (the metrics tightened as by
    :func:`ratcheted`), joined by this run (only the pool, ``cases``, ``run`` and ``updated_at`` change),
    or kept (None: a full pool is frozen; a blocked run never moves it). ``release``: the run's release;
    a run of the pool's founding release always joins, and when ``paired`` says it was blocked (the
    caller passes a blocked run only when the paired test alone blocked it) only the pool changes, its
    join recorded at ``now``.
    """
    reference = None if old is None else old.reference()
    at = _timestamp(now)
    pool = next_pool(reference, cases, paired, settings, release=release, run=run, at=at)
    if pool is None:
        return None
    if old is not None and paired is not None and paired.get("blocks"):
        return replace(old, pool=pool)  # blocked: the pool learns, nothing is promoted
    if old is None or pool.runs == 1:
        return ratcheted(
            old,
            metrics,
            fabrication_count=fabrication_count,
            n_cases=n_cases,
            run=run,
            now=now,
            cases=cases,
            pool=pool,
        )
    return replace(old, updated_at=at, run=old.run if run is None else run, cases=dict(cases), pool=pool)


def promote(
    path: VersionedFile | str | Path,
    mode: str,
    metrics: Mapping[str, float],
    *,
    passed: bool,
    fabrication_count: int | None = None,
    n_cases: int | None = None,
    run: str | None = None,
    now: datetime | None = None,
    cases: Mapping[str, bool] | None = None,
    known: Iterable[str] | None = None,
    scope: Scope = Scope.GOLDEN,
) -> BaselineEntry:
    """Tighten ``mode``'s entry with a passing run's values and write the file; return the new entry.

    The ratchet is one :func:`locked_update`: it tightens the value current under the lock, never a
    stale copy. ``known``, when given, checks the metric names in the file.
    """
    name = path.name if not isinstance(path, (str, Path)) else str(path)
    if not passed:
        raise InputError(name, "refusing to promote a failing run: the baseline is unchanged")
    _checked_current(metrics)  # a misuse fails before the file is touched
    _timestamp(now)
    entry = locked_update(
        path,
        mode,
        known,
        lambda old: ratcheted(
            old, metrics, fabrication_count=fabrication_count, n_cases=n_cases, run=run, now=now, cases=cases
        ),
        scope,
    )
    assert entry is not None  # the change always returns an entry
    return entry


def set_by_hand(
    store: VersionedFile | str | Path,
    mode: str,
    metric: str,
    value: float,
    *,
    by: str,
    reason: str,
    now: datetime | None = None,
    known: Iterable[str] | None = None,
    scope: Scope = Scope.GOLDEN,
) -> BaselineChange | None:
    """Set ``mode``'s listed value of ``metric`` (a canonical name, or ``fabrication_count``) to ``value``
    and record the change in the entry's history; return it (None: the entry already holds that value,
    nothing is written).

    One :func:`locked_update`, so it can neither be lost to nor overwrite a concurrent promotion. The
    entry must exist and list the metric (the count: have one): a new bar is a gate, or a promotion's.
    ``by`` and ``reason`` must be non-empty, ``reason`` one line; the value's range is the caller's check.
    """
    name = store.name if not isinstance(store, (str, Path)) else str(store)
    at = _timestamp(now)
    if not by.strip() or not reason.strip() or len(reason.splitlines()) != 1:
        raise BaselineError("a change by hand needs a person and a one-line reason")
    number = _checked_count(FABRICATION, value) if metric == FABRICATION else finite(value)
    if number is None:
        raise BaselineError(f"cannot set {metric} to {value!r}, not a finite number")
    done: dict[str, BaselineChange] = {}

    def change(old: BaselineEntry | None) -> BaselineEntry | None:
        if old is None:
            raise InputError(name, f"mode '{mode}': no entry to change")
        before = old.fabrication_count if metric == FABRICATION else old.metrics.get(metric)
        if before is None:
            listed = ", ".join([*old.metrics, *([FABRICATION] if old.fabrication_count is not None else [])])
            raise InputError(
                name,
                f"mode '{mode}' lists no {metric} (listed: {listed or 'none'}): a value set by hand "
                "changes a listed one; a new bar is a gate",
            )
        done.pop("change", None)
        if before == number:
            return None
        record = BaselineChange(metric, before, number, by.strip(), at, reason.strip())
        done["change"] = record
        if metric == FABRICATION:
            new = replace(old, fabrication_count=number)
        else:
            new = replace(old, metrics={**old.metrics, metric: number})
        return replace(new, history=(*old.history, record))

    locked_update(store, mode, known, change, scope)
    return done.get("change")


def _ratchet(old: Mapping[str, float], current: Mapping[str, float]) -> dict[str, float]:
    """Listed metrics become the better value, new ones are added, unmeasured ones are kept."""
    merged = {
        name: better(name, base, current[name]) if name in current else base for name, base in old.items()
    }
    merged.update({name: value for name, value in current.items() if name not in old})
    return merged


def _lower_known(old: int | None, current: int | None) -> int | None:
    if old is None or current is None:
        return current if old is None else old
    return min(old, current)


def _checked_current(metrics: Mapping[str, float]) -> dict[str, float]:
    """The measured metrics (None = not measured) as floats; a non-finite value is a misuse."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if value is None:
            continue
        number = finite(value)
        if number is None:
            raise BaselineError(f"metric '{name}': cannot promote {value!r}, not a finite number")
        out[name] = number
    return out


def _checked_count(key: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise BaselineError(f"{key} must be a non-negative integer or None, got {value!r}")
    return int(value)


def _timestamp(now: datetime | None) -> str:
    if now is None:
        now = datetime.now(UTC)
    elif now.tzinfo is None or now.utcoffset() is None:
        raise BaselineError("'now' must be timezone-aware")
    return now.astimezone(UTC).strftime(TIMESTAMP_FORMAT)
