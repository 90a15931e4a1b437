"""A baseline comparison for stochastic systems under test: a paired test of the cases that flipped.

When the system under test samples (an LLM at temperature > 0), the golden pass rate of identical runs
varies, and the strict rule — strictly below the baseline fails, the baseline takes the better of old and
current — blocks honest runs after a lucky one. The paired rule compares case by case instead: over the
golden cases both the baseline run and this run evaluated, ``b`` cases passed then and fail now
(regressions) and ``c`` failed then and pass now (improvements). Cases that did not flip say nothing
about a change. With no real change each flip is as likely to go either way, so ``b ~ Binomial(b + c,
½)``: the exact one-sided McNemar test.

* **Block** when regressions significantly outnumber improvements, ``P(X ≥ b) < alpha``, *and* the net
  drop ``(b − c) / n`` is larger than ``margin`` (a real but immaterial drop does not block).
* **Ratchet** (the baseline's cases and metrics move to this run's) only on a clearly significant
  improvement, ``P(X ≥ c) < ratchet_alpha`` with ``c > b`` (default 0.001, much stricter than ``alpha``:
  a reference that a lucky run set would make every honest run after it look worse); otherwise the
  baseline stays as it was — it never moves on noise, and it never moves down.

Every comparison is against the same reference run, so a run that happened to be lucky when it became the
reference makes later honest runs look worse more often than ``alpha`` says; the benchmark
(``bench/bench_release_noise.py``) reports the spread over sequences as well as the mean.

A case "passes" when it is releasable (with an evidence registry) or its label is ``OK`` /
``REFUSAL_OK`` (``decision.evaluation.Evaluation.case_outcomes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from pydantic import BaseModel, ConfigDict, Field, StrictFloat


class PairedSettings(BaseModel):
    """``paired:`` in the gates config (used when ``baseline_test: paired``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: StrictFloat = Field(default=0.05, gt=0, lt=1, description="level of the test that blocks")
    margin: StrictFloat = Field(default=0.02, ge=0, lt=1, description="net drop (rate points) tolerated")
    ratchet_alpha: StrictFloat = Field(
        default=0.001, gt=0, lt=1, description="level of the test that moves the baseline up"
    )


@dataclass(frozen=True)
class PairedComparison:
    """This run's case outcomes against the baseline's, on the cases both evaluated."""

    n: int  # cases in both
    regressed: list[str]  # passed in the baseline run, fail now
    improved: list[str]  # failed in the baseline run, pass now
    p_worse: float  # one-sided exact McNemar: P(X >= b | b + c, 1/2)
    p_better: float  # P(X >= c | b + c, 1/2)
    drop: float  # (b - c) / n, rate points
    alpha: float
    margin: float
    ratchet_alpha: float
    only_in_baseline: int = 0
    only_in_run: int = 0
    blocks: bool = field(init=False)
    improves: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", self.p_worse < self.alpha and self.drop > self.margin)
        b, c = len(self.regressed), len(self.improved)
        object.__setattr__(self, "improves", c > b and self.p_better < self.ratchet_alpha)

    def summary(self) -> str:
        """One line for people: ``4 of 84 cases regressed, 1 improved (net −3.6 points, p = 0.19)``."""
        b, c = len(self.regressed), len(self.improved)
        return (
            f"{b} of {self.n} cases regressed, {c} improved (net {-100 * self.drop:+.1f} points, "
            f"p = {self.p_worse:.3g} for a drop, {self.p_better:.3g} for a gain)"
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "regressed": sorted(self.regressed), "improved": sorted(self.improved)}


def paired_test(
    baseline: Mapping[str, bool], current: Mapping[str, bool], settings: PairedSettings | None = None
) -> PairedComparison:
    """Compare per-case outcomes (``{case id: passed}``) on the cases present in both."""
    # Imported here: scipy.stats costs every run half a second of start-up, and only this test needs it.
    from scipy.stats import binomtest

    settings = settings or PairedSettings()
    common = baseline.keys() & current.keys()
    regressed = sorted(qid for qid in common if baseline[qid] and not current[qid])
    improved = sorted(qid for qid in common if not baseline[qid] and current[qid])
    b, c = len(regressed), len(improved)
    flips = b + c
    p_worse = binomtest(b, flips, 0.5, alternative="greater").pvalue if flips else 1.0
    p_better = binomtest(c, flips, 0.5, alternative="greater").pvalue if flips else 1.0
    return PairedComparison(
        n=len(common),
        regressed=regressed,
        improved=improved,
        p_worse=float(p_worse),
        p_better=float(p_better),
        drop=(b - c) / len(common) if common else 0.0,
        alpha=settings.alpha,
        margin=settings.margin,
        ratchet_alpha=settings.ratchet_alpha,
        only_in_baseline=len(baseline.keys() - current.keys()),
        only_in_run=len(current.keys() - baseline.keys()),
    )
