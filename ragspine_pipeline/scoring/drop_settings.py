"""The settings of the nightly drop tests (the ``production:`` section of the gates config) and which
way each production rate worsens. The tests themselves, and what each setting does: ``scoring.significance``
(and docs/nightly.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from ragspine_pipeline.metrics import family

DEFAULT_POWER = 0.8
DEFAULT_SAMPLE_CAP = 20_000  # ``SampleTarget.max``

# Every production proportion, and which way it worsens (the count of fabricating refusals by its rate
# among refusals), from the registry (``ragspine_pipeline.metrics``).
WORSE_WHEN = {
    m.name: "higher" if m.lower_is_better else "lower"
    for m in family("production")
    if m.kind in ("rate", "count")
}
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
Weekday = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]


class EffectThresholds(BaseModel):
    """One rate's own effect thresholds (``production: {effect: {<rate>: ...}}``); a key left out takes the
    default of the section, ``min_relative_change: null`` turns the relative threshold off for the rate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_drop: float | None = Field(default=None, strict=True, ge=0, le=1, allow_inf_nan=False)
    min_relative_change: float | None = Field(default=None, strict=True, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _given(self) -> EffectThresholds:
        if not self.model_fields_set:
            raise ValueError("give min_drop or min_relative_change (or both)")
        if "min_drop" in self.model_fields_set and self.min_drop is None:
            raise ValueError("min_drop must be a number (leave it out to use the section's)")
        return self


class SampleTarget(BaseModel):
    """``production: {sample: {...}}`` in the gates config: score each night as many traces as a drop of
    ``detect`` rate points needs to be caught with ``power`` (``nightly_sample_plan``), at most ``max`` and
    never fewer than the fixed sample size (``RAGSPINE_SAMPLE_SIZE`` / the component's ``sample_size``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    detect: float = Field(
        strict=True, gt=0, le=1, allow_inf_nan=False, description="the drop to catch, in rate points (0.02)"
    )
    power: float = Field(
        default=DEFAULT_POWER, strict=True, gt=0, lt=1, description="the chance of catching it (0.8)"
    )
    rate: str | None = Field(
        default=None,
        description="the production rate the target is for (default: the one that needs the most traces)",
    )
    max: int = Field(
        default=DEFAULT_SAMPLE_CAP, ge=1, strict=True, description="the most traces scored a night"
    )

    @field_validator("rate")
    @classmethod
    def _known_rate(cls, rate: str | None) -> str | None:
        if rate is not None and rate not in WORSE_WHEN:
            raise ValueError(
                f"unknown production rate {rate!r}; the rates tested nightly: {', '.join(WORSE_WHEN)}"
            )
        return rate


class DropSettings(BaseModel):
    """How the nightly drop tests are run (the ``production:`` section of the gates config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fdr: float = Field(
        default=0.02, gt=0, lt=1, strict=True, description="false-discovery rate over the night's tests"
    )
    min_drop: float = Field(
        default=0.02,
        strict=True,
        ge=0,
        le=1,
        description="smallest worsening that alerts (0.02: two rate points)",
    )
    min_relative_change: float | None = Field(
        default=0.5,
        strict=True,
        ge=0,
        allow_inf_nan=False,
        description="or smallest growth of the failure share that alerts, relative to itself (0.5: by half; "
        "null: off)",
    )
    effect: dict[str, EffectThresholds] = Field(
        default_factory=dict, description="per-rate min_drop / min_relative_change overriding the above"
    )
    window: int = Field(
        default=14, ge=1, strict=True, description="trailing nights the level is estimated from"
    )
    variance_window: int = Field(
        default=28,
        ge=2,
        strict=True,
        description="trailing nights the between-day variance is estimated from",
    )
    recent_nights: int = Field(
        default=3,
        ge=1,
        strict=True,
        description="nights pooled by the multi-night test (1: one-night tests only)",
    )
    sustained_nights: int = Field(
        default=7,
        ge=1,
        strict=True,
        description="nights pooled by the longer multi-night test (1: none)",
    )
    min_days: int = Field(
        default=5, ge=2, strict=True, description="trailing nights needed before a rate is tested"
    )
    min_n: int = Field(default=100, ge=1, strict=True, description="observations needed tonight and trailing")
    weekly: Literal["auto", "off"] = Field(
        default="auto",
        description="auto: a rate whose history shows a weekly pattern is compared with nights of its own "
        "day type (weekend or weekday); off: with every night",
    )
    weekend: tuple[Weekday, ...] = Field(
        default=("saturday", "sunday"), min_length=1, max_length=6, description="the weekend's days"
    )
    all_traffic_weight: float = Field(
        default=4.0,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="weight of an all-traffic test relative to a slice test",
    )
    all_traffic_tonight_weight: float = Field(
        default=3.0,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="extra weight of the all-traffic one-night test, times all_traffic_weight: a drop of "
        "all traffic is caught the night it happens",
    )
    sustained_weight: float = Field(
        default=1.0,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="weight of a sustained_nights test relative to the shorter windows' tests",
    )
    mix_shift: float = Field(
        default=0.1,
        gt=0,
        le=1,
        strict=True,
        allow_inf_nan=False,
        description="share of the traffic whose slice changed (total variation distance from the "
        "reference nights' mix) from which the all-traffic rate at the usual mix is a test of the night",
    )
    recovery_sd: float = Field(
        default=1.645,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="an open incident's rate is back when its last recovery_nights nights pooled are no "
        "more than this many standard deviations worse than the level it dropped from",
    )
    recovery_nights: int = Field(
        default=2,
        ge=1,
        strict=True,
        description="nights pooled to judge an open incident's rate back (more for a rate whose drop so "
        "few nights cannot tell apart from its level)",
    )
    sample: SampleTarget | None = Field(
        default=None,
        description="the nightly sample size from a target: {detect, power, rate, max} (null: the fixed "
        "size, RAGSPINE_SAMPLE_SIZE or the component's sample_size)",
    )

    @field_validator("effect")
    @classmethod
    def _known_rates(cls, effect: dict[str, EffectThresholds]) -> dict[str, EffectThresholds]:
        unknown = sorted(set(effect) - set(WORSE_WHEN))
        if unknown:
            raise ValueError(
                f"unknown production rate {unknown[0]!r}; the rates tested nightly: {', '.join(WORSE_WHEN)}"
            )
        return effect

    @field_serializer("effect")
    def _as_given(self, effect: dict[str, EffectThresholds]) -> dict[str, dict]:
        # Only the keys a rate sets: a key left out inherits, so a dump must read back the same.
        return {metric: own.model_dump(exclude_unset=True) for metric, own in effect.items()}

    def thresholds(self, metric: str) -> tuple[float, float | None]:
        """``(min_drop, min_relative_change)`` for ``metric``: its own ``effect`` entry, else the defaults."""
        own = self.effect.get(metric)
        if own is None:
            return self.min_drop, self.min_relative_change
        given = own.model_fields_set
        return (
            own.min_drop if "min_drop" in given else self.min_drop,
            own.min_relative_change if "min_relative_change" in given else self.min_relative_change,
        )

    @property
    def windows(self) -> list[int]:
        """The nights each test pools: tonight alone, then the multi-night windows."""
        return sorted({1, self.recent_nights, self.sustained_nights})

    @property
    def history_nights(self) -> int:
        """How many nights before tonight the tests read."""
        return self.variance_window + max(self.windows)

    @model_validator(mode="after")
    def _windows(self) -> DropSettings:
        if self.variance_window < self.window:
            raise ValueError("variance_window must be at least window")
        if self.min_days > self.window:
            raise ValueError("min_days cannot exceed window")
        return self
