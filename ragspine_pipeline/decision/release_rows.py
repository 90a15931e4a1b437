"""The rows of a release decision (``decision.release.ReleaseDecision``): each failed gate, failed
slice, baseline regression and unmeasured gate, and each gate as the reports show it. Frozen pydantic
models; a writer that left a ``delta`` out has it worked out here (value − reference)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragspine_pipeline.decision.gates import GateResult

# Frozen; unknown keys ignored, so a decision written by a newer version still reads.
MODEL_CONFIG = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


def _with_delta(data: Any, value: str, reference: str) -> Any:
    """``data`` with ``delta`` = value − reference when it does not carry one (the one statement of it)."""
    if not isinstance(data, Mapping) or data.get("delta") is not None:
        return data
    numbers = [data.get(value), data.get(reference)]
    if all(isinstance(x, int | float) and not isinstance(x, bool) for x in numbers):
        return {**data, "delta": numbers[0] - numbers[1]}
    return data  # validation names what is missing


class FailedGate(BaseModel):
    """A gate that failed: ``delta`` = value − threshold (worked out here when a writer left it out)."""

    model_config = MODEL_CONFIG

    metric: str
    value: float
    op: str
    threshold: float
    delta: float
    severity: str = "hard"

    @model_validator(mode="before")
    @classmethod
    def _delta(cls, data: Any) -> Any:
        return _with_delta(data, "value", "threshold")


class FailedSlice(BaseModel):
    model_config = MODEL_CONFIG

    dimension: str
    value: str
    n: int
    releasable_rate: float
    ci95: tuple[float, float] | None = None  # its 95 % Wilson interval
    min_rate: float


class BaselineRegression(BaseModel):
    """A baselined metric worse than its baseline (``fabrication_count`` for the count)."""

    model_config = MODEL_CONFIG

    metric: str
    baseline: float
    current: float
    delta: float  # current - baseline (worked out here when a writer left it out)

    @model_validator(mode="before")
    @classmethod
    def _delta(cls, data: Any) -> Any:
        return _with_delta(data, "current", "baseline")


class UnmeasuredGate(BaseModel):
    """A gate whose metric the run did not measure: a hard one blocks. ``reason``: why, when the run
    knows (the trace field its cases lack); None when the metric was not computed at all."""

    model_config = MODEL_CONFIG

    metric: str
    op: str
    threshold: float
    severity: str = "hard"
    reason: str | None = None


class GateRow(BaseModel):
    """One gate of the run as reports show it: the verdict beside the value, numerator and denominator
    of the metric it judged (one :class:`~ragspine_pipeline.decision.gates.GateResult`). ``value`` is
    None and ``pass`` None when the metric does not apply (its denominator is 0): it never blocks."""

    model_config = MODEL_CONFIG

    metric: str
    op: str
    threshold: float
    value: float | None
    passed: bool | None = Field(alias="pass")
    severity: str = "hard"
    applicable: bool = True
    denominator: int | None = None
    numerator: int | None = None

    @classmethod
    def of(cls, result: GateResult, digits: int | None = None) -> GateRow:
        """The row of ``result``; ``digits`` rounds its value for display (gates decided unrounded)."""
        value = result.value
        return cls(
            metric=result.gate.metric,
            op=result.gate.op,
            threshold=result.gate.threshold,
            value=value if value is None or digits is None else round(value, digits),
            passed=result.passed,
            severity=result.gate.severity,
            applicable=result.applicable,
            denominator=result.result.denominator,
            numerator=result.result.numerator,
        )
