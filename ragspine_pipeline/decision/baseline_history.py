"""A baseline entry's ``history``: every value someone set by hand, with who, when, why and what it was.

Contract:

* A change is ``{"metric", "from", "to", "by", "at", "reason"}``: the metric as the entry names it (the
  fabrication count as ``fabrication_count``), the value before and after (finite numbers; the count's
  whole numbers), the person (a non-empty string), the UTC time (``YYYY-MM-DDTHH:MM:SSZ``) and the reason
  (one non-empty line). Any other key, or a value of another type, is refused with one line naming the
  file, the mode and the change.
* The history is a list, oldest first; only ``ragspine-eval baseline set`` appends to it
  (``decision.baseline.set_by_hand``), and a promotion carries it over unchanged.
* :func:`standing_changes`: per metric, its latest change while the entry still holds the value that
  change set. A run judged against the entry reports each as a warning (:func:`change_sentence`): a bar
  someone lowered stays visible in every decision until a run tightens it past that value again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ragspine_pipeline.errors import InputError, printable
from ragspine_pipeline.jsonvalues import describe, finite, json_type

CHANGE_KEYS = ("metric", "from", "to", "by", "at", "reason")
COUNT_KEY = "fabrication_count"  # the entry's key for the fabrication count, named so in a change
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


@dataclass(frozen=True)
class BaselineChange:
    """One value set by hand: ``metric`` (canonical, or ``fabrication_count``), ``before`` → ``after``."""

    metric: str
    before: float
    after: float
    by: str
    at: str
    reason: str

    @property
    def lowered(self) -> bool:
        return self.after < self.before


def change_sentence(change: BaselineChange) -> str:
    """``baseline <metric> lowered from X to Y by WHO at WHEN: REASON`` (``raised`` when it went up)."""
    verb = "lowered" if change.lowered else "raised"
    # Who and why come from a file anyone may have edited: shown with control characters escaped.
    return (
        f"baseline {change.metric} {verb} from {_number(change.before)} to {_number(change.after)} "
        f"by {printable(change.by)} at {printable(change.at)}: {printable(change.reason)}"
    )


def standing_changes(
    history: Iterable[BaselineChange], metrics: Mapping[str, float], fabrication_count: int | None
) -> list[BaselineChange]:
    """Per metric, its latest change, kept while the entry still holds the value it set; history order."""
    latest: dict[str, BaselineChange] = {}
    for change in history:
        latest.pop(change.metric, None)  # a later change of the same metric replaces it, in order
        latest[change.metric] = change
    current = {**metrics, COUNT_KEY: fabrication_count}
    return [change for metric, change in latest.items() if current.get(metric) == change.after]


def parse_history(
    value: Any, fail: Callable[[str], InputError], resolve: Callable[[str], str]
) -> tuple[BaselineChange, ...]:
    """The ``history`` list of an entry (None: no history); ``resolve`` reads a metric name as the entry's
    metrics are read. ``fail`` turns a message into the one-line error for the entry."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail(f"'history' must be a list of changes, got {json_type(value)}")
    return tuple(_change(item, n, fail, resolve) for n, item in enumerate(value, start=1))


def _change(
    item: Any, n: int, fail: Callable[[str], InputError], resolve: Callable[[str], str]
) -> BaselineChange:
    def bad(message: str) -> InputError:
        return fail(f"history change {n}: {message}")

    if not isinstance(item, dict):
        raise bad(f"expected an object, got {json_type(item)}")
    keys = set(item)
    if keys != set(CHANGE_KEYS):
        wrong = sorted(keys - set(CHANGE_KEYS)) or sorted(set(CHANGE_KEYS) - keys)
        what = "unknown key" if keys - set(CHANGE_KEYS) else "missing key"
        raise bad(f"{what} '{wrong[0]}' (a change has: {', '.join(CHANGE_KEYS)})")
    metric = item["metric"]
    if not isinstance(metric, str) or not metric.strip():
        raise bad(f"'metric' must be a metric name, got {describe(metric)}")
    name = COUNT_KEY if metric.strip() == COUNT_KEY else resolve(metric)
    before, after = (_value(bad, key, item[key], name == COUNT_KEY) for key in ("from", "to"))
    for key in ("by", "reason"):
        if not isinstance(item[key], str) or not item[key].strip():
            raise bad(f"'{key}' must be a non-empty string, got {describe(item[key])}")
    if not isinstance(item["at"], str) or not _TIMESTAMP.fullmatch(item["at"]):
        raise bad(f"'at' must be a UTC time YYYY-MM-DDTHH:MM:SSZ, got {describe(item['at'])}")
    return BaselineChange(name, before, after, item["by"], item["at"], item["reason"])


def _value(bad: Callable[[str], InputError], key: str, value: Any, count: bool) -> float:
    number = finite(value)
    if number is None or (count and (not isinstance(value, int) or value < 0)):
        wanted = "a non-negative whole number" if count else "a finite number"
        raise bad(f"'{key}' must be {wanted}, got {describe(value)}")
    return value if count else number


def history_json(history: Iterable[BaselineChange], name: Callable[[str], str]) -> list[dict[str, Any]]:
    """The history as the file holds it; ``name`` writes a metric the way the entry's metrics are written."""
    return [
        {
            "metric": change.metric if change.metric == COUNT_KEY else name(change.metric),
            "from": change.before,
            "to": change.after,
            "by": change.by,
            "at": change.at,
            "reason": change.reason,
        }
        for change in history
    ]


def _number(value: float) -> str:
    """A value as the file writes it: ``0.8``, ``2`` (a count), never rounded."""
    return str(value)
