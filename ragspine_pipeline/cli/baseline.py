"""``ragspine-eval baseline set``: change one baseline value by hand, on the record.

The value is set under the same lock as the ratchet (``decision.baseline.set_by_hand``; a local path or
``s3://bucket/key``), and the entry's ``history`` gains who (``RAGSPINE_ACTOR``, else ``USER``, else
``LOGNAME``), when, why and the value before. Every later decision against the entry warns about it
while the value stands. Lowering is what it is for; raising is allowed and says that it tightens.

Exit codes: 0 the value is set (or the entry already held it: nothing is written), 2 the input is
unusable (one line: no such file, mode or listed metric, a value out of the metric's range, no reason,
no person).
"""

from __future__ import annotations

import argparse
import math
import os

from ragspine_pipeline.cli.args import EXIT_PASS, UsageError
from ragspine_pipeline.decision import baseline as baselines
from ragspine_pipeline.decision.baseline_history import change_sentence
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
from ragspine_pipeline.decision.gates import LOWER_IS_BETTER, GateSpecError, canonical_metric
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.metrics import Scope
from ragspine_pipeline.metrics import metric as registered
from ragspine_pipeline.sources.versioned import open_versioned, s3_endpoint

ACTOR_VARIABLES = ("RAGSPINE_ACTOR", "USER", "LOGNAME")
# The values a metric of each kind can take (``ragspine_pipeline.metrics``): a count is a whole number.
RANGES = {"rate": (0.0, 1.0), "score": (1.0, 5.0), "count": (0.0, math.inf), "statistic": (0.0, math.inf)}


def run_set(args: argparse.Namespace) -> int:
    reason = args.reason.strip()
    if not reason or len(reason.splitlines()) != 1 or not reason.isprintable():
        raise UsageError(
            "--reason must say why, on one line of printable text (it is kept in the baseline's history)"
        )
    by = actor()
    mode = args.mode or baselines.DEFAULT_MODE
    store = open_versioned(args.baseline, "baseline", endpoint_url=s3_endpoint())
    text = store.read()
    if text is None:
        raise InputError(store.name, "no baseline here: a value set by hand changes a listed one")
    scope = baselines.file_scope(text, store.name)
    modes = list(baselines.parse_baseline(text, store.name, scope)[1])  # the whole file reads, or exit 2
    if mode not in modes:
        raise InputError(store.name, f"no entry for mode '{mode}' (modes: {', '.join(modes) or 'none'})")
    metric = _metric(args.metric, scope)
    value = _value(metric, args.to)
    change = baselines.set_by_hand(
        store, mode, metric, value, by=by, reason=reason, known=KNOWN_METRICS, scope=scope
    )
    if change is None:
        print(f"{store.name}: mode '{mode}': {metric} is already {value}: unchanged")
        return EXIT_PASS
    lower_is_better = (
        baselines.COUNT_METRIC if metric == baselines.FABRICATION else metric
    ) in LOWER_IS_BETTER
    if change.lowered != lower_is_better:
        effect = f"a looser bar: a run at {value} now passes it"
    else:
        effect = f"a stricter bar: a run worse than {value} now blocks"
    print(f"{store.name}: mode '{mode}': {change_sentence(change)} ({effect}; kept in the entry's history)")
    return EXIT_PASS


def actor(doing: str = "changing the baseline", kept: str = "in its history") -> str:
    """Who is ``doing`` it: the first of :data:`ACTOR_VARIABLES` set to a one-line printable name."""
    for variable in ACTOR_VARIABLES:
        name = os.environ.get(variable, "").strip()
        if name and len(name.splitlines()) == 1 and name.isprintable():
            return name
    raise UsageError(f"who is {doing}? set RAGSPINE_ACTOR (or USER): the name is kept {kept}")


def _metric(raw: str, scope: Scope) -> str:
    """``--metric`` as the entry names it: a metric's own name, or ``fabrication_count`` for the count."""
    if raw.strip() in baselines.COUNT_METRICS:
        return baselines.FABRICATION
    try:
        return canonical_metric(raw, KNOWN_METRICS, scope)
    except GateSpecError as exc:
        raise UsageError(f"--metric: {exc}") from None


def _value(metric: str, raw: str) -> float | int:
    """``--to`` as a value the metric can take (:data:`RANGES`)."""
    kind = "count" if metric == baselines.FABRICATION else registered(metric).kind
    low, high = RANGES[kind]
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not low <= value <= high:
        span = "a whole number of at least 0" if kind == "count" else f"a number from {low:g} to {high:g}"
        raise UsageError(f"--to: '{raw}' is not a value of {metric}: give {span}")
    if kind == "count":
        if not value.is_integer():
            raise UsageError(f"--to: '{raw}' is not a value of {metric}: give a whole number of at least 0")
        return int(value)
    return value
