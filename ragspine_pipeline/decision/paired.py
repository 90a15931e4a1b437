"""A baseline comparison for stochastic systems under test: this run's cases against a pool of recent
shipping runs.

When the system under test samples (an LLM at temperature > 0), the golden pass rate of identical runs
varies, and the strict rule — strictly below the baseline fails, the baseline takes the better of old and
current — blocks honest runs after a lucky one. The paired rule compares case by case instead, and its
reference is not one run but a **pool** of several recent shipping runs: one lucky run cannot set it.

**The reference.** Per golden case the baseline keeps how many of the pooled runs passed it and in how
many it was evaluated (``passes_i`` of ``K_i``), and how many runs the pool holds (:class:`Pool`). A
baseline written before pools existed (one run's ``{case id: passed}``) is a pool of one run.

**The test.** With no change to the system, this run and the ``K_i`` pooled runs of case ``i`` are
exchangeable: given ``m_i``, the passes among those ``K_i + 1`` runs, this run's outcome ``x_i`` is
Bernoulli(``m_i / (K_i + 1)``), independently over cases. Over the cases both the pool and this run hold,
``T = Σ x_i`` (this run's passes) then has a Poisson-binomial distribution, computed exactly (a
convolution of the per-case Bernoullis; a case that passed in all ``K_i + 1`` runs, or in none, is fixed
and says nothing about a change):

* ``p_worse = P(T ≤ t)`` and ``p_better = P(T ≥ t)`` for the observed ``t``;
* the net drop is the pooled reference pass rate minus this run's: ``(Σ passes_i / K_i − Σ x_i) / n``.

With one pooled run (``K_i = 1``) only the flipped cases vary, each with probability ½: this is exactly
the one-sided exact McNemar test of the cases that flipped.

* **Block** when ``p_worse < alpha`` *and* the net drop is larger than ``margin`` (a real but immaterial
  drop does not block).
* **Improves** when ``p_better < ratchet_alpha`` (default 0.001, much stricter than ``alpha``) and this
  run's pass rate is above the pool's.

**The pool, when a run ships** (:func:`next_pool`; a blocked run never changes it):

* no pool yet: the pool starts from this run;
* a clear improvement (``improves``): the pool restarts from this run alone, and fills again;
* fewer than ``pool_runs`` runs pooled (default 5): this run joins the pool (per case, ``passes += x_i``
  and ``runs += 1``; a new case starts at ``[x_i, 1]``);
* otherwise the pool is full and stays as it is.

Why frozen and not rolling: a pool that always took the latest shipping runs would let a slow decline —
each step too small to block — pull the reference down run by run, so the baseline would move down. A
pool that kept only the better runs would be a lucky reference again. A full pool therefore moves only up,
and only on a clearly significant improvement.

For people, the result still lists the cases that regressed (the pool passed them at least half the time,
this run failed them) and improved (the pool passed them less than half the time, this run passed them).
The benchmark (``bench/bench_release_noise.py``) reports blocks over sequences of unchanged runs and the
share of real drops blocked.

A case "passes" when it is releasable (with an evidence registry) or its label is ``OK`` /
``REFUSAL_OK`` (``decision.evaluation.Evaluation.case_outcomes``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt


class PairedSettings(BaseModel):
    """``paired:`` in the gates config (used when ``baseline_test: paired``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 0.02, not 0.05: re-evaluations of an unchanged system are many and each is a chance to block; at
    # 0.05 about 13 % of 30-run sequences had 3 blocks or more (bench/bench_release_noise.py), at 0.02 3 %.
    alpha: StrictFloat = Field(default=0.02, gt=0, lt=1, description="level of the test that blocks")
    margin: StrictFloat = Field(default=0.02, ge=0, lt=1, description="net drop (rate points) tolerated")
    ratchet_alpha: StrictFloat = Field(
        default=0.001, gt=0, lt=1, description="level of the test that moves the baseline up"
    )
    pool_runs: StrictInt = Field(
        default=5, ge=1, le=100, description="shipping runs pooled into the reference before it is frozen"
    )


@dataclass(frozen=True)
class Pool:
    """The paired test's reference: per case ``(passes, runs)`` over the pooled shipping runs, and how
    many runs were pooled (a case added later was evaluated in fewer of them)."""

    cases: dict[str, tuple[int, int]]
    runs: int

    @classmethod
    def of_run(cls, outcomes: Mapping[str, bool]) -> Pool:
        """A pool of one run (``{case id: passed}``): also how a baseline without a pool is read."""
        return cls({qid: (int(bool(ok)), 1) for qid, ok in outcomes.items()}, 1)

    def joined(self, outcomes: Mapping[str, bool]) -> Pool:
        """This pool with one more run: its cases' counts grow, its new cases start at ``(x, 1)``."""
        cases = dict(self.cases)
        for qid, ok in outcomes.items():
            passes, runs = cases.get(qid, (0, 0))
            cases[qid] = (passes + int(bool(ok)), runs + 1)
        return Pool(cases, self.runs + 1)

    def share(self, qid: str) -> float:
        """The share of the pooled runs that passed case ``qid``."""
        passes, runs = self.cases[qid]
        return passes / runs


@dataclass(frozen=True)
class PairedComparison:
    """This run's case outcomes against the reference pool, on the cases both hold."""

    n: int  # cases in both
    regressed: list[str]  # the pool passed at least half the time, fail now
    improved: list[str]  # the pool passed less than half the time, pass now
    p_worse: float  # P(T <= t) under no change (Poisson-binomial)
    p_better: float  # P(T >= t)
    drop: float  # reference pass rate - this run's, rate points
    alpha: float
    margin: float
    ratchet_alpha: float
    only_in_baseline: int = 0
    only_in_run: int = 0
    reference_runs: int = 1  # shipping runs pooled into the reference
    reference_rate: float = 0.0  # mean over the common cases of the pool's pass share
    current_rate: float = 0.0  # this run's pass rate over the common cases
    blocks: bool = field(init=False)
    improves: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", self.p_worse < self.alpha and self.drop > self.margin)
        better = self.current_rate > self.reference_rate and self.p_better < self.ratchet_alpha
        object.__setattr__(self, "improves", better)

    def summary(self) -> str:
        """One line for people: ``pass rate 81.5 % vs 84.2 % over 5 reference runs on 200 cases (net
        −2.7 points, p = 0.07 for a drop, 0.95 for a gain); 9 regressed, 4 improved``."""
        runs = f"{self.reference_runs} reference run{'s' if self.reference_runs != 1 else ''}"
        return (
            f"pass rate {100 * self.current_rate:.1f} % vs {100 * self.reference_rate:.1f} % over {runs} "
            f"on {self.n} cases (net {-100 * self.drop:+.1f} points, p = {self.p_worse:.3g} for a drop, "
            f"{self.p_better:.3g} for a gain); {len(self.regressed)} regressed, {len(self.improved)} improved"
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "regressed": sorted(self.regressed), "improved": sorted(self.improved)}


def paired_test(
    baseline: Pool | Mapping[str, bool], current: Mapping[str, bool], settings: PairedSettings | None = None
) -> PairedComparison:
    """Compare per-case outcomes (``{case id: passed}``) with the reference pool (a run's
    ``{case id: passed}``: a pool of one run) on the cases present in both."""
    settings = settings or PairedSettings()
    pool = baseline if isinstance(baseline, Pool) else Pool.of_run(baseline)
    common = sorted(pool.cases.keys() & current.keys())
    passed = np.array([bool(current[qid]) for qid in common], dtype=bool)
    passes = np.array([pool.cases[qid][0] for qid in common], dtype=np.int64)
    runs = np.array([pool.cases[qid][1] for qid in common], dtype=np.int64)
    p_worse, p_better = poisson_binomial_tails(passes + passed, runs + 1, passed)
    n = len(common)
    reference = float(np.sum(passes / runs)) if n else 0.0
    share = passes / runs if n else np.zeros(0)
    return PairedComparison(
        n=n,
        regressed=[qid for qid, ok, s in zip(common, passed, share, strict=True) if s >= 0.5 and not ok],
        improved=[qid for qid, ok, s in zip(common, passed, share, strict=True) if s < 0.5 and ok],
        p_worse=p_worse,
        p_better=p_better,
        drop=(reference - int(passed.sum())) / n if n else 0.0,
        alpha=settings.alpha,
        margin=settings.margin,
        ratchet_alpha=settings.ratchet_alpha,
        only_in_baseline=len(pool.cases.keys() - current.keys()),
        only_in_run=len(current.keys() - pool.cases.keys()),
        reference_runs=pool.runs,
        reference_rate=reference / n if n else 0.0,
        current_rate=float(passed.mean()) if n else 0.0,
    )


def poisson_binomial_tails(m: np.ndarray, k: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """``(P(T ≤ t), P(T ≥ t))`` for ``T = Σ X_i``, ``X_i ~ Bernoulli(m_i / k_i)`` independent, and the
    observed ``t = Σ x_i``. Cases with ``m_i`` of 0 or ``k_i`` are fixed (their ``x_i`` is known), so only
    the others count; with none left both tails are 1. Cases of one probability make a binomial, and
    the distribution is the convolution of those binomials."""
    varying = (m > 0) & (m < k)
    observed = int(np.sum(x[varying]))
    pmf = np.ones(1)
    fractions, sizes = np.unique(np.stack([m[varying], k[varying]]), axis=1, return_counts=True)
    for (passes, runs), size in zip(fractions.T, sizes, strict=True):
        pmf = np.convolve(pmf, _binomial_pmf(int(size), passes / runs))
    return _probability(pmf[: observed + 1].sum()), _probability(pmf[observed:].sum())


def _binomial_pmf(size: int, p: float) -> np.ndarray:
    """``P(X = j)`` for ``j = 0 … size``, ``X ~ Binomial(size, p)``, ``0 < p < 1`` (in logs: no overflow)."""
    j = np.arange(size + 1)
    log_choose = np.array([math.lgamma(size + 1) - math.lgamma(i + 1) - math.lgamma(size - i + 1) for i in j])
    return np.exp(log_choose + j * math.log(p) + (size - j) * math.log1p(-p))


def next_pool(
    pool: Pool | None,
    outcomes: Mapping[str, bool],
    comparison: Mapping | None,
    settings: PairedSettings | None = None,
) -> Pool | None:
    """The pool a shipping run leaves (None: the pool stays as it is). ``comparison``: the run's
    :meth:`PairedComparison.to_dict` against ``pool`` (None when there was no pool to compare with).

    No pool yet, or a clear improvement (``improves``): the pool starts again from this run alone. A
    pool of fewer than ``pool_runs`` runs takes this run in. A full pool stays frozen, so a slow decline
    cannot drag the reference down; a blocked run never changes the pool.
    """
    settings = settings or PairedSettings()
    if comparison is not None and comparison.get("blocks"):
        return None
    if pool is None or (comparison is not None and comparison.get("improves")):
        return Pool.of_run(outcomes)
    if pool.runs < settings.pool_runs:
        return pool.joined(outcomes)
    return None


def _probability(value: float) -> float:
    """A sum of probabilities as a float in [0, 1] (rounding can step just outside)."""
    return float(min(1.0, max(0.0, value)))
