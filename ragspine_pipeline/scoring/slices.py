"""Slice health: every layered metric and the releasable rate per value of every tag.

A slice is one value of one tag dimension (``workflow=release-freeze``). Each slice reports its size n,
the releasable count and rate with a 95 % Wilson interval, and the mean of every metric over the cases
of the slice where that metric applies, with that count (a metric that applies to none is null).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.scoring import means
from ragspine_pipeline.scoring.grounded import right_outcome
from ragspine_pipeline.scoring.layered import RATIO_DENOMINATORS
from ragspine_pipeline.scoring.stats import wilson_interval


@dataclass(frozen=True)
class Slice:
    dimension: str
    value: str
    n: int
    releasable: int
    releasable_rate: float
    ci_low: float
    ci_high: float
    metrics: dict[str, float | None]
    metric_n: dict[str, int]

    def as_dict(self, flag: str = "releasable") -> dict:
        """As JSON data; ``flag`` names the per-case flag counted (``right`` for :func:`outcome_slices`)."""
        out = {
            "n": self.n,
            flag: self.releasable,
            f"{flag}_rate": self.releasable_rate,
            f"{flag}_ci95": [self.ci_low, self.ci_high],
        }
        for name, value in self.metrics.items():
            out[name] = value
            out[f"{name}_n"] = self.metric_n[name]
        return out


def slices(tags: pa.Array, cases: pa.Table, metric_names: Sequence[str]) -> list[Slice]:
    """Aggregate the per-case ``releasable`` flag and metrics (null = not applicable) per tag value.

    ``tags`` is the gold ``tags`` map column, aligned with ``cases``. Slices come sorted by dimension,
    then value. Counts are integers and each metric mean is exact, rounded once (``scoring.means``):
    the exact mean of the per-case ratios when ``cases`` has the metric's denominator column
    (``layered.RATIO_DENOMINATORS``), else of the per-case doubles. The same cases in any order give
    the same slices.
    """
    tags = tags.combine_chunks() if isinstance(tags, pa.ChunkedArray) else tags
    offsets = np.asarray(tags.offsets, dtype=np.int64)
    rows = np.repeat(np.arange(len(tags)), np.diff(offsets))
    entries = pa.array(offsets[0] + np.arange(len(rows)))
    group, keys = _tag_groups(tags.keys.take(entries), tags.items.take(entries))
    n_groups = keys.num_rows
    taken = pa.array(rows)
    releasable = np.asarray(cases.column("releasable").combine_chunks().take(taken), dtype=bool)
    n = np.bincount(group, minlength=n_groups)
    ok = np.bincount(group[releasable], minlength=n_groups)
    low, high = wilson_interval(ok, n)
    metrics, metric_n = {}, {}
    for name in metric_names:
        values = cases.column(name)
        denominator = RATIO_DENOMINATORS.get(name)
        denominators = cases.column(denominator) if denominator in cases.column_names else None
        metrics[name] = means.group_means(values, group, n_groups, denominators, rows=rows)
        applies = np.asarray(values.is_valid(), dtype=bool)[rows]
        metric_n[name] = np.bincount(group[applies], minlength=n_groups).tolist()
    order = pc.sort_indices(keys, sort_keys=[("dimension", "ascending"), ("value", "ascending")])
    dimensions, tag_values = keys.column("dimension").to_pylist(), keys.column("value").to_pylist()
    return [
        Slice(
            dimension=dimensions[i],
            value=tag_values[i],
            n=int(n[i]),
            releasable=int(ok[i]),
            releasable_rate=float(ok[i] / n[i]),
            ci_low=float(low[i]),
            ci_high=float(high[i]),
            metrics={name: metrics[name][i] for name in metric_names},
            metric_n={name: metric_n[name][i] for name in metric_names},
        )
        for i in np.asarray(order).tolist()
    ]


def _tag_groups(dimension: pa.Array, value: pa.Array) -> tuple[np.ndarray, pa.Table]:
    """Number the distinct (dimension, value) pairs: each tag entry's group, and each group's pair."""
    dimension_codes = pc.dictionary_encode(dimension, null_encoding="encode")
    value_codes = pc.dictionary_encode(value, null_encoding="encode")
    n_values = max(len(value_codes.dictionary), 1)
    pair = np.asarray(dimension_codes.indices, dtype=np.int64) * n_values + np.asarray(value_codes.indices)
    numbered = pc.dictionary_encode(pa.array(pair, pa.int64()))  # one hash pass: group = index
    present = np.asarray(numbered.dictionary, dtype=np.int64)
    keys = pa.table(
        {
            "dimension": dimension_codes.dictionary.take(pa.array(present // n_values)),
            "value": value_codes.dictionary.take(pa.array(present % n_values)),
        }
    )
    return np.asarray(numbered.indices, dtype=np.intp), keys


def worst_first(all_slices: list[Slice]) -> list[Slice]:
    """Lowest releasable rate first; among equals the larger slice, then by name."""
    return sorted(all_slices, key=lambda s: (s.releasable_rate, -s.n, s.dimension, s.value))


# The per-case grounded flags a slice without a layered evaluation reports the mean of.
OUTCOME_FLAGS = ("citation_hit", "contained", "recall_hit")


def outcome_slices(tags: pa.Array, grounded_cases: pa.Table) -> list[Slice]:
    """Slices of a run without a layered evaluation (no evidence registry): per tag value, the cases
    whose outcome is right (label ``OK`` or ``REFUSAL_OK``: answered with a citation hit, or rightly
    refused) counted as the slice's flag, with its 95 % Wilson interval, and the share of citation hits,
    contained answers and recalled cases among the cases each applies to. No gate judges them."""
    table = pa.table(
        {
            "releasable": pc.fill_null(right_outcome(grounded_cases), False),
            **{name: grounded_cases.column(name).cast(pa.float64()) for name in OUTCOME_FLAGS},
        }
    )
    return slices(tags, table, OUTCOME_FLAGS)
