"""What the production metrics give (``scoring.production``): each figure with its denominator and, for a
rate, its 95 % Wilson interval; for all traces, per admissibility rule and per slice; rounded to 4
decimals only when written as JSON."""

from __future__ import annotations

from dataclasses import dataclass

_DIGITS = 4


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), _DIGITS)


@dataclass(frozen=True)
class Rate:
    """A proportion with its denominator and 95 % Wilson interval; ``effective_n`` when the n
    observations are not independent (claims clustered in answers). ``value`` is None when n = 0."""

    value: float | None
    n: int
    low: float
    high: float
    effective_n: float | None = None

    @property
    def successes(self) -> int:
        return 0 if self.value is None else round(self.value * self.n)

    def to_dict(self) -> dict:
        out = {
            "value": _rounded(self.value),
            "n": self.n,
            "successes": self.successes,  # exact: what a later day's drop test pools
            "low": _rounded(self.low),
            "high": _rounded(self.high),
        }
        if self.effective_n is not None:
            out["effective_n"] = round(self.effective_n, 2)
        return out


@dataclass(frozen=True)
class Count:
    """A count of events among n (fabricated numbers among refusals), its rate (None when n = 0) and 95 %
    Wilson interval."""

    value: int
    n: int
    rate: float | None
    low: float
    high: float

    def to_dict(self) -> dict:
        return {
            "value": self.value,
            "n": self.n,
            "rate": _rounded(self.rate),
            "low": _rounded(self.low),
            "high": _rounded(self.high),
        }


@dataclass(frozen=True)
class Statistic:
    """A latency or token statistic over the n traces that carry the measurement (None when n = 0)."""

    value: float | int | None
    n: int

    def to_dict(self) -> dict:
        value = self.value if self.value is None or isinstance(self.value, int) else _rounded(self.value)
        return {"value": value, "n": self.n}


Metric = Rate | Count | Statistic


@dataclass(frozen=True)
class MetricSet:
    """Every metric over one set of traces (all of them, or one slice)."""

    n: int
    metrics: dict[str, Metric]

    def metrics_dict(self) -> dict:
        return {name: metric.to_dict() for name, metric in self.metrics.items()}


@dataclass(frozen=True)
class ProductionMetrics:
    """Unrounded production metrics: overall, per admissibility rule and per slice."""

    n: int
    metrics: dict[str, Metric]
    admissibility_failures: dict[str, int]
    slices: dict[str, dict[str, MetricSet]]

    def to_dict(self) -> dict:
        """The JSON-ready report (figures rounded to 4 decimals)::

        {"n": int,
         "metrics": {"refusal_rate": {"value", "n", "successes", "low", "high"}, ...,
                     "production_fabrication": {"value": count, "n": refusals, "rate", "low", "high"},
                     "latency_p50_ms": {"value": float | None, "n"}, ...},
         "admissibility_failures": {rule: count},     # {} without a registry
         "slices": {dimension: {value: {"n": int, "metrics": {...same shape...}}}}}
        """
        return {
            "n": self.n,
            "metrics": {name: metric.to_dict() for name, metric in self.metrics.items()},
            "admissibility_failures": dict(self.admissibility_failures),
            "slices": {
                dimension: {value: {"n": s.n, "metrics": s.metrics_dict()} for value, s in values.items()}
                for dimension, values in self.slices.items()
            },
        }
