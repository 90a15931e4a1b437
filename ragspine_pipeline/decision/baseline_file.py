"""A baseline file: its format, read into :class:`BaselineEntry` per mode, and each entry written back.

Contract:

* A baseline file is a JSON object keyed by mode (default ``"golden"``). Each entry is
  ``{"metrics": {name: number}, "fabrication_count": int|null, "n_cases": int|null,
  "updated_at": "YYYY-MM-DDTHH:MM:SSZ"|null, "run": str|null, "history": [change, ...]}``; every key but
  ``metrics`` may be missing. Unknown keys and duplicate keys are rejected (a misspelt key would silently
  drop a check). ``history`` lists the values set by hand (``decision.baseline_history``).
* A file in RAGSpine's ``qa_baseline.json`` shape stays in it when written (``decision.ragspine_baseline``:
  RAGSpine's gates in ``metrics``, everything else under the entry's ``ragspine_pipeline`` key, which
  RAGSpine's loader ignores); it is read as one flat entry like any other.
* An entry may keep the paired baseline test's reference (``decision.paired``): ``pool`` (``{case id:
  [passes, runs]}``: per case, how many of the pooled shipping runs passed it and in how many it was
  evaluated) with ``pooled_runs`` (how many runs the pool holds), and ``cases`` (``{case id: passed}``):
  the per-case outcomes of the last run promoted (what the case explorer shows flips against). An entry
  with ``cases`` and no ``pool`` (written before pools) is read as a pool of that one run
  (:meth:`BaselineEntry.reference`). ``pool`` and ``pooled_runs`` come together; ``0 ≤ passes ≤ runs ≤
  pooled_runs`` and ``runs ≥ 1``; ``pool_release`` (the release that founded the pool) and
  ``pool_history`` (the blocked runs of it that joined) may follow them (``decision.paired_pool``).
* Metric names resolve like ``--gates`` (``under``, ``over``, ``recall``, ``recall@5``, old names), so a
  short or old name is checked like its metric; an old name whose metric depends on the run
  (``faithfulness``: the layered claim metric with an evidence registry, RAGSpine's narrative gate
  without one, as a RAGSpine ``qa_baseline.json`` means it) is read in the run's scope. A promotion
  writes the entry back under the metrics' own names. :func:`load_baseline` refuses a name that is not
  one of the caller's ``known`` metrics (listing them), two names of one metric in one entry, and
  ``fabrication`` in ``metrics`` (the count is the entry's ``fabrication_count``). A metric value must
  be a finite number (a boolean is not one).
* Problems with the file raise ``InputError`` naming the file (and the mode and metric), on one line.
  ``BaselineError`` is for programming misuse only (e.g. a non-finite current value, a naive ``now``).

Comparing a run with an entry and ratcheting it under the file's lock: ``decision.baseline``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragspine_pipeline import inputs
from ragspine_pipeline.decision.baseline_history import (
    COUNT_KEY,
    BaselineChange,
    history_json,
    parse_history,
    standing_changes,
)
from ragspine_pipeline.decision.gates import GateSpecError, canonical_metric, canonical_names
from ragspine_pipeline.decision.paired import Pool
from ragspine_pipeline.decision.paired_pool import pool_from_entry, pool_json
from ragspine_pipeline.decision.ragspine_baseline import (
    EXTRA_KEY,
    EXTRA_KEYS,
    RAGSPINE_KEYS,
    flattened,
    is_ragspine_shaped,
)
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import LockedFile, VersionedFile
from ragspine_pipeline.jsonvalues import DuplicateKey, describe, finite, json_type, no_duplicate_keys
from ragspine_pipeline.metrics import GOLDEN_FAMILIES, Scope, family

DEFAULT_MODE = "golden"
# The one metric of a golden run that counts answers (the registry, ``ragspine_pipeline.metrics``): the
# fabrication count, which an entry keeps under its own key.
(_COUNT,) = (m for m in family(*GOLDEN_FAMILIES) if m.kind == "count")
COUNT_METRIC = _COUNT.name
FABRICATION = COUNT_KEY  # the entry's key for it (also a registered alias of it)
# Every name of that metric: never drawn on a 0–100 % axis, never shown with a rate's decimals, listed
# after the rates in an alert.
COUNT_METRICS = frozenset({COUNT_METRIC, *_COUNT.other_names()})
# An entry's keys: RAGSpine's own, then this pipeline's (flat, or under EXTRA_KEY in RAGSpine's format).
ENTRY_KEYS = (*RAGSPINE_KEYS, *EXTRA_KEYS[1:], EXTRA_KEY)
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class BaselineError(ValueError):
    """A programming misuse of this module (never a problem with the user's file)."""


@dataclass(frozen=True)
class BaselineEntry:
    metrics: dict[str, float]
    fabrication_count: int | None = None
    n_cases: int | None = None
    updated_at: str | None = None
    run: str | None = None
    cases: dict[str, bool] | None = None  # per-case outcomes of the last promoted run (paired test)
    history: tuple[BaselineChange, ...] = ()  # values set by hand, oldest first
    pool: Pool | None = None  # the paired test's reference pool (``decision.paired``)

    def reference(self) -> Pool | None:
        """The paired test's reference: the pool, else the recorded run as a pool of one, else None."""
        if self.pool is not None:
            return self.pool
        return None if self.cases is None else Pool.of_run(self.cases)

    def standing_changes(self) -> list[BaselineChange]:
        """The changes by hand whose value the entry still holds (``baseline_history.standing_changes``)."""
        return standing_changes(self.history, self.metrics, self.fabrication_count)


# --- read ------------------------------------------------------------------------------------------


def load_baseline(
    path: str | Path, known: Iterable[str], scope: Scope = Scope.GOLDEN
) -> dict[str, BaselineEntry]:
    """Every mode's entry, metric names resolved in ``scope``; a missing file is an empty baseline.

    ``known``: the metric names a run can report (``decision.evaluation.KNOWN_METRICS``); a baseline
    metric that is none of them is an ``InputError`` naming the file, the mode and the name.
    """
    return read_baseline(LockedFile(path, "baseline"), known, scope)


def read_baseline(
    store: VersionedFile, known: Iterable[str], scope: Scope = Scope.GOLDEN, text: str | None = None
) -> dict[str, BaselineEntry]:
    """:func:`load_baseline` of any versioned file (a local path or an S3 object): a snapshot, for
    reporting; a decision that promotes compares inside ``baseline.locked_update`` instead. ``text``: the
    file's text when the caller read it already (None: read it here)."""
    entries = parse_baseline(store.read() if text is None else text, store.name, scope)[1]
    check_names(store.name, entries, list(known))
    return entries


def parse_baseline(
    text: str | None, name: str, scope: Scope = Scope.GOLDEN
) -> tuple[dict[str, Any], dict[str, BaselineEntry]]:
    """A baseline file's text (None: no file yet) as its top-level JSON object and its parsed entries,
    metric names resolved in ``scope`` (an ambiguous old name is an ``InputError`` naming both metrics)."""
    raw = _top_level(text, name)
    return raw, {mode: _parse_entry(name, mode, value, scope) for mode, value in raw.items()}


def is_ragspine_file(text: str | None, name: str) -> bool:
    """Whether a baseline file's text is RAGSpine's ``qa_baseline.json`` shape (no file: not)."""
    return is_ragspine_shaped(_top_level(text, name))


def file_scope(text: str | None, name: str) -> Scope:
    """Where a baseline file's names are read when no run says: a file in RAGSpine's shape as RAGSpine's
    runs read it (no evidence registry: its ``faithfulness`` is the narrative gate), any other file in
    the golden scope, where a name meaning two metrics is an error."""
    return Scope.WITHOUT_REGISTRY if is_ragspine_file(text, name) else Scope.GOLDEN


def _top_level(text: str | None, name: str) -> dict[str, Any]:
    """The file's top-level JSON object ({} for no file); one-line errors for anything else."""
    if text is None:
        return {}
    if not text.strip():
        raise InputError(name, "empty file: expected a JSON object keyed by mode")
    try:
        raw = inputs.loads(text, name, object_pairs_hook=no_duplicate_keys)
    except DuplicateKey as exc:
        raise InputError(name, f"duplicate key '{exc.key}'") from None
    if not isinstance(raw, dict):
        raise InputError(name, f"expected a JSON object keyed by mode, got {json_type(raw)}")
    return raw


def _parse_entry(path: str | Path, mode: str, value: Any, scope: Scope) -> BaselineEntry:
    def fail(message: str) -> InputError:
        return InputError(str(path), f"mode '{mode}': {message}")

    if not isinstance(value, dict):
        raise fail(f"expected an object, got {json_type(value)}")
    value = flattened(value, fail)
    unknown = [key for key in value if key not in ENTRY_KEYS]
    if unknown:
        raise fail(f"unknown key '{unknown[0]}' (expected: {', '.join(ENTRY_KEYS)})")
    if "metrics" not in value:
        raise fail("missing 'metrics'")
    raw_metrics = value["metrics"]
    if not isinstance(raw_metrics, dict):
        raise fail(f"'metrics' must be an object, got {json_type(raw_metrics)}")
    try:
        names = canonical_names(raw_metrics, scope=scope)
    except GateSpecError as exc:
        raise fail(str(exc)) from None
    metrics = {names[name]: _metric_value(fail, name, number) for name, number in raw_metrics.items()}

    def resolve(name: str) -> str:
        try:
            return canonical_metric(name, scope=scope)
        except GateSpecError as exc:
            raise fail(str(exc)) from None

    return BaselineEntry(
        metrics=metrics,
        fabrication_count=_count(fail, FABRICATION, value.get(FABRICATION)),
        n_cases=_count(fail, "n_cases", value.get("n_cases")),
        updated_at=_text(fail, "updated_at", value.get("updated_at")),
        run=_text(fail, "run", value.get("run")),
        cases=_cases(fail, value.get("cases")),
        history=parse_history(value.get("history"), fail, resolve),
        pool=pool_from_entry(fail, value),
    )


def _cases(fail: Callable[[str], InputError], value: Any) -> dict[str, bool] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, bool) for v in value.values()):
        raise fail(f"'cases' must be an object of case id: true|false, got {describe(value)}")
    return dict(value)


def _metric_value(fail: Callable[[str], InputError], name: str, value: Any) -> float:
    if name.strip() in (FABRICATION, COUNT_METRIC):
        raise fail(f"'{name.strip()}' is a count, not a metric: give it as the entry's '{FABRICATION}'")
    number = finite(value)  # None for a boolean, a string, NaN or an infinity
    if number is None:
        raise fail(f"metric '{name}' must be a finite number, got {describe(value)}")
    return number


def _count(fail: Callable[[str], InputError], key: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(f"'{key}' must be a non-negative integer or null, got {describe(value)}")
    return value


def _text(fail: Callable[[str], InputError], key: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise fail(f"'{key}' must be a string or null, got {describe(value)}")
    return value


def check_names(name: str, entries: Mapping[str, BaselineEntry], known: list[str] | None) -> None:
    """Every metric name of every entry (its history's included) is one of ``known`` (None: not checked)."""
    if known is None:
        return
    for mode, entry in entries.items():
        try:
            for metric in entry.metrics:
                canonical_metric(metric, known)
        except GateSpecError as exc:
            raise InputError(name, f"mode '{mode}': {exc}") from None
        for n, change in enumerate(entry.history, start=1):
            try:
                if change.metric != FABRICATION:
                    canonical_metric(change.metric, known)
            except GateSpecError as exc:
                raise InputError(name, f"mode '{mode}': history change {n}: {exc}") from None


# --- write -----------------------------------------------------------------------------------------


def entry_json(entry: BaselineEntry, name: Callable[[str], str] | None = None) -> dict[str, Any]:
    """The entry as this pipeline's shape holds it; ``name`` writes each metric's name (default: its own)."""
    name = name or (lambda metric: metric)
    out: dict[str, Any] = {
        "metrics": {name(metric): value for metric, value in entry.metrics.items()},
        "fabrication_count": entry.fabrication_count,
        "n_cases": entry.n_cases,
        "updated_at": entry.updated_at,
        "run": entry.run,
    }
    if entry.cases is not None:
        out["cases"] = {qid: entry.cases[qid] for qid in sorted(entry.cases)}
    if entry.pool is not None:
        out.update(pool_json(entry.pool))
    if entry.history:
        out["history"] = history_json(entry.history, name)
    return out
