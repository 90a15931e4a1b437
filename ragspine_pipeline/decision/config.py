"""The committed evaluation config (docs/decisions.md): gates, slice gate, k and required versions, in YAML.

```yaml
k: 5
required_versions: [index, retriever]        # version keys every trace must carry (admissibility;
                                              # default: the harness's six, scoring.layered)
gates:                                        # any metric by name; min or max
  precision: {min: 0.80}
  under_refusal: {max: 0.05}
  point_coverage: {min: 0.80, severity: soft}  # soft: reported as a warning, never blocks
slice_gate: {min_rate: 0.95, min_n: 1}        # releasable rate per slice
production:                                   # the nightly drop tests (scoring.significance)
  fdr: 0.02                                   # false-discovery rate over one night's tests
  min_drop: 0.02                              # smallest worsening that alerts, in rate points,
  min_relative_change: 0.5                    # or growth of the failure share, relative to itself
  effect: {refusal_rate: {min_drop: 0.01}}    # per rate, overriding either
alerts:
  runbook:                                    # one line per stream, shown in every alert of it
    release: "Open the slice report; fix the first failed stage first."
baseline_test: paired                         # strict (default) | paired: for a SUT that samples
paired: {alpha: 0.05, margin: 0.02}           # exact test against a pool of shipping runs (pool_runs)
```

A ``gates`` mapping is the complete gate set (it replaces the defaults); without one, the defaults of
the dialects the data carries apply (``decision.run_gates.default_gates_for``). Metric names resolve
like ``--gates`` (``under``, ``over``, ``recall``, and old names such as ``faithfulness``). Errors name
the file and the field (and the line when the YAML itself is at fault): unknown keys, unknown metric
names (the known ones are listed), an ambiguous old name, two names for one metric in ``gates``, a key
repeated in any mapping (YAML would keep the last one silently), and thresholds that are not finite
numbers — ``true``, ``"0.5"``, ``.nan`` and ``.inf`` included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from ragspine_pipeline import inputs
from ragspine_pipeline.decision.gates import Gate, GateSpecError, canonical_names
from ragspine_pipeline.decision.paired import PairedSettings
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.metrics import Scope
from ragspine_pipeline.scoring.drop_settings import DropSettings
from ragspine_pipeline.scoring.fabrication import PERIOD_PATTERN, check_period_pattern
from ragspine_pipeline.scoring.layered import DEFAULT_REQUIRED_VERSIONS

Threshold = Annotated[float, Strict(), AllowInfNan(False)]
"""A finite number as YAML writes one: no boolean (``true`` is not 1), no string, no ``.nan`` / ``.inf``."""


class GateSpec(BaseModel):
    """Exactly one of ``min`` / ``max``; ``severity`` hard (blocks the release) or soft (warns)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    min_: Threshold | None = Field(default=None, alias="min")
    max_: Threshold | None = Field(default=None, alias="max")
    severity: Literal["hard", "soft"] = "hard"

    @model_validator(mode="after")
    def _one_bound(self) -> GateSpec:
        if (self.min_ is None) == (self.max_ is None):
            raise ValueError("give exactly one of min or max")
        return self


class SliceGate(BaseModel):
    """A slice (one value of one tag) with at least ``min_n`` cases must be releasable at ``min_rate``."""

    model_config = ConfigDict(extra="forbid")

    min_rate: Threshold = Field(default=0.95, ge=0, le=1)
    min_n: StrictInt = Field(default=1, ge=1)


RUNBOOK_STREAMS = ("release", "extraction", "production", "run_failure")


class AlertConfig(BaseModel):
    """What alerts say beyond the figures: a runbook line per stream (release, extraction, production,
    run_failure)."""

    model_config = ConfigDict(extra="forbid")

    runbook: dict[Literal[RUNBOOK_STREAMS], str] = Field(default_factory=dict)


class RefusalSettings(BaseModel):
    """What counts as a refusal when a trace does not say (``scoring.refusal``)."""

    model_config = ConfigDict(extra="forbid")

    phrases: list[str] = Field(default_factory=lambda: ["not in context"])
    patterns: list[str] = Field(default_factory=list)

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return patterns


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k: StrictInt = Field(default=5, ge=1)
    required_versions: list[str] = Field(default_factory=lambda: list(DEFAULT_REQUIRED_VERSIONS))
    gates: dict[str, GateSpec] | None = None
    slice_gate: SliceGate = Field(default_factory=SliceGate)
    # Period tokens (FY2025, 2025H1, …) removed from refusal answers before numbers are counted.
    period_pattern: str = PERIOD_PATTERN
    production: DropSettings = Field(default_factory=DropSettings)
    alerts: AlertConfig = Field(default_factory=AlertConfig)
    # How a run is compared with its baseline: "strict" (a listed metric strictly worse fails, the
    # baseline takes the better value) for deterministic systems; "paired" (each case against a reference
    # pooled from recent shipping runs, ``decision.paired``) for systems that sample.
    baseline_test: Literal["strict", "paired"] = "strict"
    paired: PairedSettings = Field(default_factory=PairedSettings)
    # The directory of reference texts, one per narrative_doc, that answer_accuracy measures against;
    # relative to the config file. ``--references`` overrides it.
    references: str | None = None
    # What counts as a refusal when a trace does not say; the default is the answer "not in context".
    refusals: RefusalSettings = Field(default_factory=RefusalSettings)
    # A gold snippet (gold_claim_substr) shorter than this never counts as found in an answer: such a
    # snippet matches too much by chance. A case whose snippets are all shorter is named in a warning.
    min_snippet_chars: StrictInt = Field(default=5, ge=1)
    # The service's traces list only the sources its answer used (as its citations), not what retrieval
    # returned: a citation counts as retrieved, and recall@k is not measured (a gate on it fails as
    # unmeasured, saying why) rather than a 0 or a 1.0 the service never earned.
    citations_are_retrieved: bool = False

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

    def gate_list(self, known: Iterable[str], scope: Scope = Scope.GOLDEN) -> list[Gate] | None:
        """The configured gates (None when the config sets none), metric names resolved in ``scope``.

        Raises :class:`GateSpecError` for an unknown or ambiguous name or two names of one metric.
        """
        if self.gates is None:
            return None
        metrics = canonical_names(self.gates, known, scope)
        return [
            Gate(metrics[name], spec.min_ if spec.min_ is not None else spec.max_,
                 "min" if spec.min_ is not None else "max", spec.severity)
            for name, spec in self.gates.items()
        ]  # fmt: skip


def read_yaml(path: str | Path) -> object:
    """The YAML document in ``path`` (None when empty), read with :class:`inputs.StrictLoader`.

    Raises ``InputError`` naming the file, and the line when the YAML is at fault.
    """
    return inputs.load_yaml(inputs.read_text(path, "config"), str(path), inputs.StrictLoader)


def load_config(path: str | Path, known_metrics: Iterable[str], scope: Scope = Scope.GOLDEN) -> EvalConfig:
    """Read and validate a config file; unknown metrics are rejected with the known ones listed, and an
    old name whose metric depends on the run (``faithfulness``) is resolved in ``scope``: rejected,
    naming both metrics, where the run's evidence registry is not known."""
    raw = read_yaml(path)
    try:
        config = EvalConfig.model_validate({} if raw is None else raw)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        raise InputError(str(path), f"{error['msg']} (got {error.get('input')!r})", field=field) from None
    try:
        config.gate_list(known_metrics, scope)
    except GateSpecError as exc:
        raise InputError(str(path), str(exc), field="gates") from None
    if config.references is not None:
        config = config.model_copy(update={"references": str(Path(path).parent / config.references)})
    return config
