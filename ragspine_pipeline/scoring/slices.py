"""Slice health (SPEC §3.2): every layered metric and the releasable rate per value of every tag.

A slice is one value of one tag dimension (``workflow=release-freeze``). Each slice reports its size n,
the releasable count and rate with a 95 % Wilson interval, and the mean of every metric over the cases
of the slice where that metric applies, with that count (a metric that applies to none is null).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

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

    def as_dict(self) -> dict:
        out = {
            "n": self.n,
            "releasable": self.releasable,
            "releasable_rate": self.releasable_rate,
            "releasable_ci95": [self.ci_low, self.ci_high],
        }
        for name, value in self.metrics.items():
            out[name] = value
            out[f"{name}_n"] = self.metric_n[name]
        return out


def slices(tags: pa.Array, cases: pa.Table, metric_names: Sequence[str]) -> list[Slice]:
    """Aggregate the per-case ``releasable`` flag and metrics (null = not applicable) per tag value.

    ``tags`` is the gold ``tags`` map column, aligned with ``cases``. Slices come sorted by dimension,
    then value.
    """
    tags = tags.combine_chunks() if isinstance(tags, pa.ChunkedArray) else tags
    offsets = np.asarray(tags.offsets, dtype=np.int64)
    rows = np.repeat(np.arange(len(tags)), np.diff(offsets))
    entries = offsets[0] + np.arange(len(rows))
    exploded = pa.table(
        {
            "dimension": tags.keys.take(pa.array(entries)),
            "value": tags.items.take(pa.array(entries)),
            "releasable": cases.column("releasable").combine_chunks().take(pa.array(rows)).cast(pa.int64()),
            **{name: cases.column(name).combine_chunks().take(pa.array(rows)) for name in metric_names},
        }
    )
    grouped = (
        exploded.group_by(["dimension", "value"], use_threads=False)
        .aggregate(
            [("releasable", "count"), ("releasable", "sum")]
            + [(name, "mean") for name in metric_names]
            + [(name, "count") for name in metric_names]
        )
        .sort_by([("dimension", "ascending"), ("value", "ascending")])
    )
    n = np.asarray(grouped.column("releasable_count"))
    ok = np.asarray(grouped.column("releasable_sum"))
    low, high = wilson_interval(ok, n)
    columns = {name: grouped.column(name).to_pylist() for name in grouped.column_names}
    return [
        Slice(
            dimension=columns["dimension"][i],
            value=columns["value"][i],
            n=int(n[i]),
            releasable=int(ok[i]),
            releasable_rate=float(ok[i] / n[i]),
            ci_low=float(low[i]),
            ci_high=float(high[i]),
            metrics={name: columns[f"{name}_mean"][i] for name in metric_names},
            metric_n={name: int(columns[f"{name}_count"][i]) for name in metric_names},
        )
        for i in range(grouped.num_rows)
    ]


def worst_first(all_slices: list[Slice]) -> list[Slice]:
    """Lowest releasable rate first; among equals the larger slice, then by name."""
    return sorted(all_slices, key=lambda s: (s.releasable_rate, -s.n, s.dimension, s.value))
