"""RAGSpine's ``qa_baseline.json`` shape, kept when this pipeline writes into such a file.

RAGSpine writes, per mode, ``{"metrics": {gate: pass_rate}, "fabrication_count": int, "n_cases": int}``
with its six gate names (:data:`RAGSPINE_METRICS`), and reads back only ``metrics`` (every name it
lists that its run measured) and ``fabrication_count`` (absent: 0) of the mode's entry; any other key of
an entry is ignored by its loader. So, in a file of that shape:

* ``metrics`` keeps RAGSpine's gates only, under RAGSpine's names (``faithfulness`` for the metric the
  name stands for where the file is read: ``decision.gates.canonical_metric``);
* everything else this pipeline records — other metrics, ``updated_at``, ``run``, ``cases``,
  ``history`` — goes under the entry's :data:`EXTRA_KEY`, which RAGSpine's loader never reads;
* ``fabrication_count`` and ``n_cases`` are written only when known (RAGSpine compares the count as a
  number: null would break its comparison, absent reads as 0);
* modes keep the file's order and the file ends without a newline, as RAGSpine's writer leaves it.

A file is of that shape (:func:`is_ragspine_shaped`) when an entry carries :data:`EXTRA_KEY`, or when it
has entries and every entry holds only RAGSpine's keys with only RAGSpine's metric names: what a file
RAGSpine wrote looks like, and never what this pipeline writes in its own shape (which always has
``updated_at``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.jsonvalues import json_type
from ragspine_pipeline.metrics import Scope, alias_targets

# RAGSpine's gate names, as its evaluator reports them and its baseline lists them (``qa_eval``'s
# ALL_GATE_METRICS: the four QA gates, then the narrative ``faithfulness`` and ``answer_accuracy``).
RAGSPINE_METRICS = (
    "numeric_accuracy",
    "citation_validity",
    "refusal_appropriateness",
    "clarification_appropriateness",
    "faithfulness",
    "answer_accuracy",
)
RAGSPINE_KEYS = ("metrics", "fabrication_count", "n_cases")
EXTRA_KEY = "ragspine_pipeline"
EXTRA_KEYS = (
    "metrics",
    "updated_at",
    "run",
    "cases",
    "pool",
    "pooled_runs",
    "pool_release",
    "pool_history",
    "history",
)


def is_ragspine_shaped(raw: Mapping[str, Any]) -> bool:
    """Whether a baseline file's top-level object is RAGSpine's shape (see the module docstring)."""
    entries = [value for value in raw.values() if isinstance(value, dict)]
    if any(EXTRA_KEY in entry for entry in entries):
        return True
    return bool(raw) and len(entries) == len(raw) and all(_ragspine_entry(entry) for entry in entries)


def _ragspine_entry(entry: dict) -> bool:
    metrics = entry.get("metrics")
    return (
        set(entry) <= set(RAGSPINE_KEYS)
        and isinstance(metrics, dict)
        and all(name in RAGSPINE_METRICS for name in metrics)
    )


def ragspine_names(scope: Scope) -> dict[str, str]:
    """``{metric: RAGSpine's name}`` of the gates RAGSpine's ``metrics`` hold, read in ``scope``: a name
    that stands for two metrics there (``faithfulness`` when the registry is not known) holds neither."""
    out = {}
    for name in RAGSPINE_METRICS:
        targets = alias_targets(name, scope)
        if len(targets) == 1:
            out[targets[0]] = name
    return out


def flattened(value: dict, fail: Callable[[str], InputError]) -> dict:
    """An entry with its :data:`EXTRA_KEY` folded in: one ``metrics`` and one set of fields, as this
    pipeline's own shape has them. A field or metric given both inside and outside it is an error."""
    extra = value.get(EXTRA_KEY)
    flat = {key: item for key, item in value.items() if key != EXTRA_KEY}
    if extra is None:
        return flat
    if not isinstance(extra, dict):
        raise fail(f"'{EXTRA_KEY}' must be an object, got {json_type(extra)}")
    unknown = [key for key in extra if key not in EXTRA_KEYS]
    if unknown:
        raise fail(f"'{EXTRA_KEY}': unknown key '{unknown[0]}' (expected: {', '.join(EXTRA_KEYS)})")
    for key, item in extra.items():
        if key == "metrics":
            continue
        if key in flat:
            raise fail(f"'{key}' is given both in the entry and in '{EXTRA_KEY}'")
        flat[key] = item
    more = extra.get("metrics", {})
    if not isinstance(more, dict):
        raise fail(f"'{EXTRA_KEY}.metrics' must be an object, got {json_type(more)}")
    main = flat.get("metrics", {})
    if isinstance(main, dict) and more:
        twice = [name for name in more if name in main]
        if twice:
            raise fail(f"metric '{twice[0]}' is given both in 'metrics' and in '{EXTRA_KEY}.metrics'")
        flat["metrics"] = {**main, **more}
    return flat


def ragspine_entry(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A flat entry (this pipeline's shape, RAGSpine's gates already under RAGSpine's names:
    :func:`ragspine_names`) in RAGSpine's shape: those gates in ``metrics``, the rest under
    :data:`EXTRA_KEY`."""
    metrics = flat["metrics"]
    out: dict[str, Any] = {
        "metrics": {name: value for name, value in metrics.items() if name in RAGSPINE_METRICS}
    }
    out.update({key: flat[key] for key in ("fabrication_count", "n_cases") if flat.get(key) is not None})
    extra: dict[str, Any] = {}
    others = {name: value for name, value in metrics.items() if name not in RAGSPINE_METRICS}
    if others:
        extra["metrics"] = others
    extra.update({key: flat[key] for key in EXTRA_KEYS[1:] if flat.get(key) is not None})
    if not extra.get("history", True):
        del extra["history"]  # no change by hand yet
    if extra:
        out[EXTRA_KEY] = extra
    return out
