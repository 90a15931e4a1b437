"""The committed evaluation config (SPEC §4): gates, slice gate, k and required versions, in YAML.

```yaml
k: 5
required_versions: [index, retriever]        # SPEC §3.2 admissibility
gates:                                        # any metric by name; min or max
  precision: {min: 0.80}
  under_refusal: {max: 0.05}
  point_coverage: {min: 0.80, severity: soft}  # soft: reported as a warning, never blocks
slice_gate: {min_rate: 0.95, min_n: 1}        # releasable rate per slice
production:                                   # the nightly drop tests (scoring.significance)
  fdr: 0.03                                   # false-discovery rate over one night's tests
  min_drop: 0.02                              # smallest worsening that alerts, in rate points
alerts:
  runbook:                                    # one line per stream, shown in every alert of it
    release: "Open the slice report; fix the first failed stage first."
```

A ``gates`` mapping is the complete gate set (it replaces the defaults). Unknown keys, unknown metric
names and malformed thresholds are errors that name the file and the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ragspine_pipeline.decision.gates import Gate, canonical_metric
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.scoring.qa_gates import PERIOD_PATTERN, check_period_pattern
from ragspine_pipeline.scoring.significance import DropSettings


class GateSpec(BaseModel):
    """Exactly one of ``min`` / ``max``; ``severity`` hard (blocks the release) or soft (warns)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    min_: float | None = Field(default=None, alias="min")
    max_: float | None = Field(default=None, alias="max")
    severity: Literal["hard", "soft"] = "hard"

    @model_validator(mode="after")
    def _one_bound(self) -> GateSpec:
        bounds = [b for b in (self.min_, self.max_) if b is not None]
        if len(bounds) != 1:
            raise ValueError("give exactly one of min or max")
        if not math.isfinite(bounds[0]):
            raise ValueError("the threshold must be a finite number")
        return self


class SliceGate(BaseModel):
    """A slice (one value of one tag) with at least ``min_n`` cases must be releasable at ``min_rate``."""

    model_config = ConfigDict(extra="forbid")

    min_rate: float = Field(default=0.95, ge=0, le=1)
    min_n: int = Field(default=1, ge=1)


RUNBOOK_STREAMS = ("release", "extraction", "production", "run_failure")


class AlertConfig(BaseModel):
    """What alerts say beyond the figures: a runbook line per stream (release, extraction, production,
    run_failure)."""

    model_config = ConfigDict(extra="forbid")

    runbook: dict[Literal[RUNBOOK_STREAMS], str] = Field(default_factory=dict)


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k: int = Field(default=5, ge=1)
    required_versions: list[str] = Field(default_factory=lambda: ["index", "retriever"])
    gates: dict[str, GateSpec] | None = None
    slice_gate: SliceGate = Field(default_factory=SliceGate)
    # SPEC §3.3: period tokens (FY2025, 2025H1, …) removed from refusal answers before numbers are counted.
    period_pattern: str = PERIOD_PATTERN
    production: DropSettings = Field(default_factory=DropSettings)
    alerts: AlertConfig = Field(default_factory=AlertConfig)

    @field_validator("period_pattern")
    @classmethod
    def _usable_pattern(cls, value: str) -> str:
        problem = check_period_pattern(value)
        if problem is not None:
            raise ValueError(f"not a usable regular expression (RE2): {problem}")
        return value

    @field_validator("required_versions")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a version key is listed twice")
        return value

    def gate_list(self, known: Iterable[str]) -> list[Gate] | None:
        """The configured gates (None when the config sets none), metric names resolved."""
        if self.gates is None:
            return None
        known = list(known)
        return [
            Gate(canonical_metric(name, known), spec.min_ if spec.min_ is not None else spec.max_,
                 "min" if spec.min_ is not None else "max", spec.severity)
            for name, spec in self.gates.items()
        ]  # fmt: skip


def load_config(path: str | Path, known_metrics: Iterable[str]) -> EvalConfig:
    """Read and validate a config file; unknown metrics are rejected with the known ones listed."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"cannot read the config: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        raise InputError(str(path), f"malformed YAML: {getattr(exc, 'problem', exc)}", line) from None
    try:
        config = EvalConfig.model_validate({} if raw is None else raw)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        raise InputError(str(path), f"{error['msg']} (got {error.get('input')!r})", field=field) from None
    try:
        config.gate_list(known_metrics)
    except ValueError as exc:
        raise InputError(str(path), str(exc), field="gates") from None
    return config
