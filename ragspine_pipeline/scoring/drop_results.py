"""What a night's drop tests say: one :class:`DropTest` per rate, slice and window, one :class:`ReturnTest`
per rate of an open incident (is it back at the level it dropped from?), and the level an incident is
judged against (:class:`FrozenLevel`). Plain data; the tests themselves are ``scoring.significance``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:  # the type only: alerts read these results without numpy and the drop settings
    from ragspine_pipeline.scoring.drop_settings import DropSettings

ALL_TRAFFIC = "all traffic"
# The all-traffic rate standardised to the reference nights' traffic mix: a slice of its own in tests,
# alerts and incidents ("retrieved_citation_rate@all traffic at the usual mix").
USUAL_MIX = "all traffic at the usual mix"
OVERALL = (ALL_TRAFFIC, USUAL_MIX)  # the rates of all traffic, not of one slice
# How the note of an all-traffic drop the traffic mix explains begins ("traffic mix changed: s0 grew from
# 12.5 % to 36.0 %"); a drop behind a mix change says "traffic mix changed (…) and the rate at the usual
# mix fell 2.9 points".
MIX_ALONE = "traffic mix changed: "

# Frozen; unknown keys ignored, so that an outbox written by a newer version still reads.
PLAIN = ConfigDict(frozen=True, extra="ignore")

METHOD = (
    "random-effects test on the arcsine scale (DerSimonian–Laird between-day variance over the nights "
    "a robust 4-sigma screen keeps, lag-1 correlated nights), "
    "weighted Benjamini–Hochberg in two stages: rates, then their tests"
)


@dataclass(frozen=True)
class MixAdjusted:
    """The all-traffic rate standardised to the reference nights' mix of ``dimension``
    (``scoring.mix``), tested like the raw rate; ``shift`` names the slice whose share moved most."""

    dimension: str
    current: float
    trailing: float | None
    worse_by: float | None
    z: float | None
    p_value: float | None
    shift: str


@dataclass(frozen=True)
class DropTest:
    """One rate of one slice over the last ``nights`` nights against the ``window`` nights before them.

    ``current`` and ``trailing`` are proportions in the metric's own direction (the refusal rate is the
    refusal rate); ``worse_by`` is how much worse tonight is, in rate points (negative: better).
    ``trailing``, ``trailing_n`` and ``trailing_days`` are over the trailing nights the screen kept;
    ``set_aside`` counts the ones it left out. ``level`` and ``level_variance`` are the trailing level on
    the arcsine scale and its variance: what an incident this test opens is judged against later.
    """

    metric: str
    slice: str  # "all traffic", "all traffic at the usual mix" or "dimension=value"
    nights: int
    current: float
    current_n: int
    trailing: float | None
    trailing_n: int
    trailing_days: int
    worse_by: float | None
    tau2: float | None  # between-day variance on the variance-stabilised (arcsine) scale
    z: float | None
    p_value: float | None
    q_value: float | None = None  # adjusted over the night's tests (``scoring.night_family``)
    significant: bool = False
    alert: bool = False
    reason: str = "tested"  # "tested", or why not
    set_aside: int = 0  # trailing nights of the level window left out as aberrant
    by_day_type: bool = False  # compared with trailing nights of its own day type (a weekly pattern)
    pooled_nights: int = 1  # of the window's nights, those pooled (an earlier aberrant night is not)
    mix_adjusted: MixAdjusted | None = None  # all traffic only: the rate at the reference traffic mix
    note: str | None = None  # "traffic mix changed: …" on an all-traffic test (``night_family``)
    level: float | None = None  # the trailing level, arcsine scale
    level_variance: float | None = None  # its variance
    rho: float = 0.0  # lag-1 correlation of the night effects the test allowed for

    @property
    def tested(self) -> bool:
        return self.p_value is not None

    @property
    def key(self) -> str:
        """What an alert about this rate is de-duplicated by (the window does not matter)."""
        return f"{self.metric}@{self.slice}"

    def to_dict(self) -> dict:
        out = asdict(self)
        for name in ("current", "trailing", "worse_by", "tau2", "z", "rho"):
            out[name] = None if out[name] is None else round(out[name], 4)
        for name in ("level", "level_variance"):
            out[name] = None if out[name] is None else float(f"{out[name]:.6g}")
        for name in ("p_value", "q_value"):
            out[name] = None if out[name] is None else float(f"{out[name]:.4g}")
        adjusted = out["mix_adjusted"]
        if adjusted is not None:
            for name in ("current", "trailing", "worse_by", "z"):
                adjusted[name] = None if adjusted[name] is None else round(adjusted[name], 4)
            p = adjusted["p_value"]
            adjusted["p_value"] = None if p is None else float(f"{p:.4g}")
        return out


class _Rate(BaseModel):
    """One production rate: a metric in a slice (``all traffic``, the usual mix or ``dimension=value``)."""

    model_config = PLAIN

    metric: str
    slice: str

    @property
    def key(self) -> str:
        return f"{self.metric}@{self.slice}"

    @property
    def overall(self) -> bool:
        """Of all traffic (raw or at the usual mix), not of one slice."""
        return self.slice in OVERALL


class FrozenLevel(_Rate):
    """The level an open incident of one rate is judged against: the trailing level of the test that
    opened it (``DropTest.level``, arcsine scale, with its variance and the between-day variance τ²),
    held fixed while the incident stays open, however the trailing nights move."""

    nights: int  # nights the opening test pooled: the most a return test pools
    level: float
    level_variance: float
    tau2: float
    trailing: float  # the same level as a rate, in the metric's own direction (for people)
    since: str  # the night the incident of this rate opened
    dropped_to: float | None = None  # the rate the opening test saw, own direction (how far it dropped)


class ReturnTest(_Rate):
    """An open incident's rate over its last ``nights`` nights against its :class:`FrozenLevel`: ``back``
    when it is within the noise of that level (``z ≤ recovery_sd``), None when it could not be judged;
    ``clearly_below`` when its last ``recovery_nights`` nights alone (``recent_z``) stand more than
    ``CLEARLY_BELOW`` standard deviations under it (a slice still down when its all-traffic rate is back;
    among several slices, :meth:`below_among`)."""

    nights: int  # the last nights pooled
    since: str
    trailing: float  # the frozen level, own direction
    dropped_to: float | None = None  # the rate when it dropped (the opening test's), own direction
    current: float | None = None
    worse_by: float | None = None
    z: float | None = None
    back: bool | None = None
    clearly_below: bool | None = None
    recent_z: float | None = None  # z over the last recovery_nights nights alone
    reason: str = "tested"

    def below_among(self, rates: int) -> bool:
        """Still clearly below, as one of ``rates`` slices judged together: one-sided 1 % for all of
        them (Bonferroni), so that eight slices back at their levels hold an incident open by chance
        on one night in a hundred, not one in twelve."""
        if self.recent_z is None:
            return bool(self.clearly_below)
        return self.recent_z > NormalDist().inv_cdf(1 - 0.01 / max(rates, 1))

    def to_dict(self) -> dict:
        out = self.model_dump()
        for name in ("trailing", "current", "worse_by", "z", "recent_z"):
            out[name] = None if out[name] is None else round(out[name], 4)
        return out


@dataclass(frozen=True)
class NightTests:
    """Every drop test of one night, the settings they ran with, which of them alert, and how each open
    incident's rates stand against the levels they dropped from."""

    day: str
    tests: list[DropTest]
    settings: DropSettings
    returns: list[ReturnTest] = field(default_factory=list)

    @property
    def tested(self) -> list[DropTest]:
        return [t for t in self.tests if t.tested]

    @property
    def alerts(self) -> list[DropTest]:
        """The alerting tests, one per rate and slice (the smallest q-value when several windows alert),
        worst first."""
        best: dict[str, DropTest] = {}
        for test in self.tests:
            if test.alert and (test.key not in best or test.q_value < best[test.key].q_value):
                best[test.key] = test
        return sorted(best.values(), key=lambda t: (t.q_value, -t.worse_by, t.key))

    def to_dict(self) -> dict:
        tested = self.tested
        return {
            "method": METHOD,
            **self.settings.model_dump(),
            "tested": len(tested),
            "untested": len(self.tests) - len(tested),
            "significant": sum(t.significant for t in tested),
            "alerts": [t.to_dict() for t in self.alerts],
            "tests": [t.to_dict() for t in sorted(self.tests, key=_display_order)],
            "returns": [r.to_dict() for r in self.returns],
        }


def _display_order(test: DropTest) -> tuple:
    return (test.p_value is None, test.q_value if test.q_value is not None else 2.0, test.key, test.nights)
