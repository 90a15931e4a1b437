"""A baseline comparison for stochastic systems under test: this run's cases against a pool of runs of
the service, founded by one release.

When the system under test samples (an LLM at temperature > 0), the golden pass rate of identical runs
varies, and the strict rule — strictly below the baseline fails, the baseline takes the better of old and
current — blocks honest runs after a lucky one. The paired rule compares case by case instead, and its
reference is not one run but a **pool** of several runs: one lucky run cannot set it.

**The reference.** Per golden case the baseline keeps how many of the pooled runs passed it and in how
many it was evaluated (``passes_i`` of ``K_i``), how many runs the pool holds, the release that founded
it and the blocked runs of that release that joined it (``decision.paired_pool.Pool``). A baseline
written before pools existed (one run's ``{case id: passed}``) is a pool of one run; one written before
releases were kept is a pool whose founding release is not known.

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

**The pool, run by run** (:func:`next_pool`; ``release`` is the run's release, when the shell knows it):

1. no pool yet: the pool starts from this run, founded by its release;
2. a run of the pool's founding release joins the pool **whatever the test said** — shipping or
   blocked, full pool or not, better or not (it never restarts it). A blocked one is recorded in the
   pool's history (:class:`~ragspine_pipeline.decision.paired_pool.PoolJoin`);
3. any other blocked run never changes the pool;
4. a clear improvement (``improves``): the pool restarts from this run alone, founded by its release;
5. fewer than ``pool_runs`` runs pooled (default 5): this run joins (per case ``passes += x_i``,
   ``runs += 1``; a new case starts at ``[x_i, 1]``);
6. otherwise the pool stays as it is: other releases no longer join it.

Why frozen to other releases: a pool that kept taking the latest shipping runs would let a slow
decline — each release too small to block — pull the reference down release by release, so the
baseline would move down. A pool that kept only the better runs would be a lucky reference again.

**Why the founding release's blocked runs join (rule 2), and why that does not lower the bar.** Before
rule 2, only runs that passed the test against the pool could join it. The pool then estimated not the
service but the service *conditioned on having beaten the pool*: with a lucky first run, the next honest
runs were blocked, only the lucky ones joined, and the pool froze above the truth. At 200 cases 4.7 % of
30-run sequences of an unchanged service had 3 blocks or more, the worst 18 of 30, where independent
runs at the same per-run rate would give 1.6 %; with rule 2, 1.05 % and 4 of 30, as independent runs
give (bench/RESULTS.md). That is a selection bias, and it is corrected by taking the runs that selection
dropped — only those known to be draws of the very system the pool measures: the runs of the release
that founded it. Each is, by construction, not a regression *of that release*; excluding the blocked
ones is what biased the pool, and taking all of them makes the pool an unselected sample of that
release, whose pass rate converges on the release's true rate as runs come in (the exchangeability the
test assumes holds for them exactly). A candidate — a run of any other release — joins only as before;
blocked, it never touches the pool, so a regression of a new release is never absorbed. The decision is
never softened either: a blocked run of the founding release is still blocked and reported; only the
reference learns from it. What a founding release's run *can* carry is a change outside the release (a
model provider updating the model behind the same name): that is why each such blocked join is recorded
(run, release, time, the pool's pass rate before and after, ``p_worse``: ``pool_history`` in the
baseline entry) and every later comparison names the founding release and how many blocked runs joined
(:meth:`PairedComparison.summary`). Without a release (the shell was given none) no run is known to be
of the founding release and the pool behaves as rules 3–6 say: re-evaluate the founding release under
its release to check a pool that blocks unchanged releases.

**Not in the null.** The test takes a run's cases as independent given the pool. A shock shared by every
case of a run (the service having a bad day) is not: such a service is blocked more often than ``alpha``
says, whatever the pool (4.7 % of unchanged runs in the benchmark's ``shock`` system at alpha 0.02).

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
from datetime import UTC, datetime

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

from ragspine_pipeline.decision.paired_pool import Pool, PoolJoin


class PairedSettings(BaseModel):
    """``paired:`` in the gates config (used when ``baseline_test: paired``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 0.02, not 0.05: re-evaluations of an unchanged system are many and each is a chance to block; even
    # independent runs need a per-run rate of at most 1.9 % for 3 blocks or more in at most 2 % of 30-run
    # sequences, and at 0.05 an unchanged run was blocked 3.6 % of the time (bench/bench_release_noise.py).
    alpha: StrictFloat = Field(default=0.02, gt=0, lt=1, description="level of the test that blocks")
    margin: StrictFloat = Field(default=0.02, ge=0, lt=1, description="net drop (rate points) tolerated")
    ratchet_alpha: StrictFloat = Field(
        default=0.001, gt=0, lt=1, description="level of the test that moves the baseline up"
    )
    pool_runs: StrictInt = Field(
        default=5,
        ge=1,
        le=100,
        description="shipping runs pooled into the reference before other releases no longer join it "
        "(runs of its founding release always do)",
    )


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
    reference_runs: int = 1  # runs pooled into the reference
    reference_rate: float = 0.0  # mean over the common cases of the pool's pass share
    current_rate: float = 0.0  # this run's pass rate over the common cases
    reference_release: str | None = None  # the release that founded the pool (None: not known)
    reference_blocked_joins: int = 0  # blocked runs of that release pooled (``Pool.joins``)
    blocks: bool = field(init=False)
    improves: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", self.p_worse < self.alpha and self.drop > self.margin)
        better = self.current_rate > self.reference_rate and self.p_better < self.ratchet_alpha
        object.__setattr__(self, "improves", better)

    def summary(self) -> str:
        """One line for people: ``pass rate 81.5 % vs 84.2 % over 5 reference runs on 200 cases (net
        −2.7 points, p = 0.07 for a drop, 0.95 for a gain); 9 regressed, 4 improved``; with a founding
        release, ``over 12 reference runs (founded by release R1, 2 of its runs pooled although
        blocked)``."""
        runs = f"{self.reference_runs} reference run{'s' if self.reference_runs != 1 else ''}"
        if self.reference_release is not None:
            joins = self.reference_blocked_joins
            blocked = f", {joins} of its runs pooled although blocked" if joins else ""
            runs += f" (founded by release {self.reference_release}{blocked})"
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
        reference_release=pool.release,
        reference_blocked_joins=len(pool.joins),
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
    *,
    release: str | None = None,
    run: str | None = None,
    at: str | None = None,
) -> Pool | None:
    """The pool this run leaves (None: the pool stays as it is), by rules 1–6 of the module docstring.

    ``comparison``: the run's :meth:`PairedComparison.to_dict` against ``pool`` (None when there was no
    pool to compare with); ``release``: the run's release (None: not known, so never the founding one);
    ``run`` and ``at`` (UTC ``YYYY-MM-DDTHH:MM:SSZ``, default now) name the run in the record of a
    blocked run of the founding release that joins. The caller passes a blocked run only when the
    paired test alone blocked it (a run blocked by a gate or an index check is no measurement of the
    release to pool).
    """
    settings = settings or PairedSettings()
    blocked = comparison is not None and bool(comparison.get("blocks"))
    if pool is not None and release is not None and release == pool.release:
        joined = pool.joined(outcomes)  # a draw of the very release the pool measures: never selected
        if not blocked:
            return joined
        when = at or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        p_worse = float(comparison["p_worse"]) if comparison is not None else 1.0
        return joined.with_join(PoolJoin(run, release, when, pool.rate, joined.rate, p_worse))
    if blocked:
        return None
    if pool is None or (comparison is not None and comparison.get("improves")):
        return Pool.of_run(outcomes, release)
    if pool.runs < settings.pool_runs:
        return pool.joined(outcomes)
    return None


def _probability(value: float) -> float:
    """A sum of probabilities as a float in [0, 1] (rounding can step just outside)."""
    return float(min(1.0, max(0.0, value)))
