"""The extraction thresholds file: per channel, the accuracy a run must keep (a ratchet, like the baseline).

Contract:

* The file is a JSON object ``{channel: threshold}``, e.g. ``{"cell_value": 0.98, "color_mapping": 0.95,
  "header_attribution": 1.0}``. Channels are those of ``scoring.extraction.CHANNELS``; a threshold is a
  number in [0, 1]. An unknown channel, a threshold that is not a number (booleans included) or is
  outside [0, 1], a duplicate key, or a file that is not such an object raise ``InputError`` naming the
  file (and the channel). A missing file is an empty baseline: nothing is checked.
* :func:`compare` checks only the listed channels, on unrounded values: a channel fails when its accuracy
  is strictly below its threshold (equal passes). A listed channel with nothing to measure (total 0,
  accuracy None) is ``unmeasured``, never failed. Channels the file does not list are not checked.
* :func:`promote` ratchets: after a passing run every listed threshold becomes max(old, current),
  measured channels not yet listed are added at their current accuracy, unmeasured ones are kept as they
  are; nothing is ever lowered. A failing run never promotes (``InputError``, the file untouched). The
  file is created if missing, written atomically, and not rewritten when its content would not change.
  Thresholds are written unrounded, so the run that set a threshold still passes it.
* Every read–compare–write is one :func:`locked_update` of a ``files.VersionedFile`` (a local file under
  an exclusive lock, or an S3 object written with conditional writes): concurrent promotions never lower
  a threshold, and a check made inside the update sees the thresholds current at that moment.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import LockedFile, VersionedFile
from ragspine_pipeline.jsonvalues import DuplicateKey, describe, finite, json_type, no_duplicate_keys
from ragspine_pipeline.scoring.extraction import CHANNELS


@dataclass(frozen=True)
class ThresholdFailure:
    channel: str
    accuracy: float
    threshold: float

    @property
    def delta(self) -> float:
        """``accuracy - threshold``, unrounded (negative for a failure)."""
        return self.accuracy - self.threshold


@dataclass(frozen=True)
class ThresholdCheck:
    """A run's channels against the thresholds file."""

    path: str | None
    thresholds: dict[str, float]
    failed: list[ThresholdFailure] = field(default_factory=list)
    unmeasured: list[str] = field(default_factory=list)  # listed, but total 0: reported, not failing

    @property
    def passed(self) -> bool:
        return not self.failed


# -- load -----------------------------------------------------------------------------------------------


def load_thresholds(path: VersionedFile | str | Path) -> dict[str, float]:
    """``{channel: threshold}`` in CHANNELS order; ``{}`` when the file does not exist. ``path`` is a
    local path or a versioned file (``sources.versioned.open_versioned``: local or S3)."""
    store = LockedFile(path, "thresholds") if isinstance(path, (str, Path)) else path
    return parse_thresholds(store.read(), store.name)


def parse_thresholds(text: str | None, name: str) -> dict[str, float]:
    """A thresholds file's text (None: no file yet) as ``{channel: threshold}`` in CHANNELS order."""
    if text is None:
        return {}
    if not text.strip():
        raise InputError(name, "empty file: expected a JSON object {channel: threshold}")
    try:
        raw = inputs.loads(text, name, object_pairs_hook=no_duplicate_keys)
    except DuplicateKey as exc:
        raise InputError(name, "duplicate key", field=exc.key) from None
    if not isinstance(raw, dict):
        raise InputError(name, f"expected a JSON object {{channel: threshold}}, got {json_type(raw)}")
    for channel, value in raw.items():
        if channel not in CHANNELS:
            raise InputError(name, f"unknown channel (expected one of: {', '.join(CHANNELS)})", field=channel)
        number = finite(value)
        if number is None or not 0.0 <= number <= 1.0:
            raise InputError(
                name, f"threshold must be a number in [0, 1], got {describe(value)}", field=channel
            )
    return {channel: float(raw[channel]) for channel in CHANNELS if channel in raw}


# -- compare --------------------------------------------------------------------------------------------


def compare(
    thresholds: Mapping[str, float], accuracies: Mapping[str, float | None], path: str | Path | None = None
) -> ThresholdCheck:
    """Every listed channel against its threshold; ``accuracies[c]`` None (or absent) means unmeasured."""
    failed: list[ThresholdFailure] = []
    unmeasured: list[str] = []
    for channel, threshold in thresholds.items():
        accuracy = accuracies.get(channel)
        if accuracy is None:
            unmeasured.append(channel)
        elif not accuracy >= threshold:
            failed.append(ThresholdFailure(channel, accuracy, threshold))
    return ThresholdCheck(
        path=None if path is None else str(path),
        thresholds=dict(thresholds),
        failed=failed,
        unmeasured=unmeasured,
    )


# -- promote --------------------------------------------------------------------------------------------


def locked_update(
    store: VersionedFile | str | Path, change: Callable[[dict[str, float]], dict[str, float] | None]
) -> dict[str, float]:
    """Read the thresholds with no other update in between, call ``change`` with them and write what it
    returns (None: write nothing); return the thresholds the file holds afterwards. ``change`` may run
    more than once (an S3 store retries after a conflicting write): it must only depend on its argument."""
    store = LockedFile(store, "extraction thresholds") if isinstance(store, (str, Path)) else store
    after: dict[str, dict[str, float]] = {}

    def update(text: str | None) -> str | None:
        old = parse_thresholds(text, store.name)
        new = change(old)
        after["thresholds"] = old if new is None else new
        return None if new is None else json.dumps(new, indent=2, allow_nan=False) + "\n"

    store.update(update)
    return after["thresholds"]


def raised(old: Mapping[str, float], accuracies: Mapping[str, float | None]) -> dict[str, float]:
    """``old`` raised to a passing run's accuracies: max per listed channel, measured new channels
    added, unmeasured ones kept; in CHANNELS order."""
    current = _measured(accuracies)
    merged: dict[str, float] = {}
    for channel in CHANNELS:
        known = [value for value in (old.get(channel), current.get(channel)) if value is not None]
        if known:
            merged[channel] = max(known)
    return merged


def promote(
    path: VersionedFile | str | Path, accuracies: Mapping[str, float | None], *, passed: bool
) -> dict[str, float]:
    """Raise the thresholds to a passing run's accuracies and write the file; return the new thresholds."""
    if not passed:
        name = path.name if not isinstance(path, (str, Path)) else str(path)
        raise InputError(name, "refusing to promote a failing run: the thresholds are unchanged")
    _measured(accuracies)  # a misuse fails before the file is touched
    return locked_update(path, lambda old: raised(old, accuracies))


def _measured(accuracies: Mapping[str, float | None]) -> dict[str, float]:
    """The measured accuracies as floats; an unknown channel or a value outside [0, 1] is a misuse."""
    out: dict[str, float] = {}
    for channel, value in accuracies.items():
        if channel not in CHANNELS:
            raise ValueError(f"unknown extraction channel '{channel}'")
        if value is None:
            continue
        number = finite(value)
        if number is None or not 0.0 <= number <= 1.0:
            raise ValueError(f"channel '{channel}': cannot promote {value!r}, not an accuracy in [0, 1]")
        out[channel] = number
    return out
