"""The paired test's reference pool (``decision.paired``) and how a baseline entry keeps it.

Contract:

* :class:`Pool`: per golden case ``(passes, runs)`` over the pooled runs, how many runs the pool holds,
  the release that founded it (None: not known) and the record of the blocked runs that joined it
  (:class:`PoolJoin`, oldest first). ``0 ≤ passes ≤ runs ≤`` the pool's runs, ``runs ≥ 1``.
* In a baseline entry (:func:`pool_from_entry`, :func:`pool_json`): ``pool`` (``{case id: [passes,
  runs]}``) and ``pooled_runs`` come together; ``pool_release`` (a non-empty string) and
  ``pool_history`` (a list of joins) may follow them and are never given without them. An entry written
  before releases were kept has neither and reads as a pool whose founding release is not known; one
  written before pools (only ``cases``) is a pool of that run (``BaselineEntry.reference``).
* A join is ``{"run", "release", "at", "from", "to", "p_worse"}``: the run's id (null when the shell
  gave none), its release, the UTC time (``YYYY-MM-DDTHH:MM:SSZ``), the pool's pass rate before and
  after it joined and the paired test's ``P(T ≤ t)`` that blocked it (finite numbers in [0, 1]). It is
  the audit of a move of the reference made by a run rather than a person (who: the run; when: ``at``;
  why: blocked at ``p_worse`` although of the founding release). Any other key, or a value of another
  type, is refused on one line naming the file, the mode and the join.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.jsonvalues import describe, finite, json_type

JOIN_KEYS = ("run", "release", "at", "from", "to", "p_worse")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


@dataclass(frozen=True)
class PoolJoin:
    """A run of the pool's founding release that the paired test blocked and that joined the pool."""

    run: str | None
    release: str
    at: str  # UTC, YYYY-MM-DDTHH:MM:SSZ
    before: float  # the pool's pass rate (:attr:`Pool.rate`) before the run joined
    after: float  # and after
    p_worse: float  # the paired test's P(T <= t) that blocked the run

    def sentence(self) -> str:
        """``run r7 of release R1 (blocked, p = 0.004) joined the reference pool at …: its pass rate
        85.0 % → 84.2 %``."""
        run = "a run" if self.run is None else f"run {self.run}"
        return (
            f"{run} of release {self.release} (blocked, p = {self.p_worse:.3g}) joined the reference pool "
            f"at {self.at}: its pass rate {100 * self.before:.1f} % → {100 * self.after:.1f} %"
        )


@dataclass(frozen=True)
class Pool:
    """The paired test's reference: per case ``(passes, runs)`` over the pooled runs, how many runs
    were pooled (a case added later was evaluated in fewer of them), the release whose every run joins
    (``release``; None: not known) and the blocked runs of it that did (``joins``)."""

    cases: dict[str, tuple[int, int]]
    runs: int
    release: str | None = None
    joins: tuple[PoolJoin, ...] = ()

    @classmethod
    def of_run(cls, outcomes: Mapping[str, bool], release: str | None = None) -> Pool:
        """A pool of one run (``{case id: passed}``), founded by its ``release``: also how a baseline
        without a pool is read (release not known)."""
        return cls({qid: (int(bool(ok)), 1) for qid, ok in outcomes.items()}, 1, release)

    def joined(self, outcomes: Mapping[str, bool]) -> Pool:
        """This pool with one more run: its cases' counts grow, its new cases start at ``(x, 1)``; the
        founding release and the joins stay."""
        cases = dict(self.cases)
        for qid, ok in outcomes.items():
            passes, runs = cases.get(qid, (0, 0))
            cases[qid] = (passes + int(bool(ok)), runs + 1)
        return replace(self, cases=cases, runs=self.runs + 1)

    def with_join(self, join: PoolJoin) -> Pool:
        """This pool with ``join`` appended to its record."""
        return replace(self, joins=(*self.joins, join))

    def share(self, qid: str) -> float:
        """The share of the pooled runs that passed case ``qid``."""
        passes, runs = self.cases[qid]
        return passes / runs

    @property
    def rate(self) -> float:
        """The pool's pass rate: the mean over its cases of :meth:`share` (0.0 for a pool of no case)."""
        if not self.cases:
            return 0.0
        return sum(passes / runs for passes, runs in self.cases.values()) / len(self.cases)


def pool_from_entry(fail: Callable[[str], InputError], entry: Mapping[str, Any]) -> Pool | None:
    """The pool a baseline entry keeps (``pool``, ``pooled_runs``, ``pool_release``, ``pool_history``;
    None: the entry has none). ``fail`` turns a message into the one-line error naming the entry."""
    value, pooled = entry.get("pool"), entry.get("pooled_runs")
    release, history = entry.get("pool_release"), entry.get("pool_history")
    if value is None and pooled is None:
        if release is not None or history is not None:
            raise fail("'pool_release' and 'pool_history' need 'pool' and 'pooled_runs'")
        return None
    if value is None or pooled is None:
        raise fail("'pool' and 'pooled_runs' go together: give both or neither")
    if isinstance(pooled, bool) or not isinstance(pooled, int) or pooled < 1:
        raise fail(f"'pooled_runs' must be a positive integer, got {describe(pooled)}")
    if not isinstance(value, dict):
        raise fail(f"'pool' must be an object of case id: [passes, runs], got {describe(value)}")
    cases: dict[str, tuple[int, int]] = {}
    for qid, counts in value.items():
        if not _is_counts(counts, pooled):
            raise fail(
                f"'pool': case '{qid}' must be [passes, runs] with 0 <= passes <= runs <= {pooled} and "
                f"runs >= 1, got {describe(counts)}"
            )
        cases[qid] = (counts[0], counts[1])
    if release is not None and (not isinstance(release, str) or not release.strip()):
        raise fail(f"'pool_release' must be a non-empty string, got {describe(release)}")
    return Pool(cases, pooled, release, _joins(fail, history))


def pool_json(pool: Pool) -> dict[str, Any]:
    """The pool as a baseline entry keeps it (``pool_release`` and ``pool_history`` only when set)."""
    out: dict[str, Any] = {
        "pool": {qid: list(pool.cases[qid]) for qid in sorted(pool.cases)},
        "pooled_runs": pool.runs,
    }
    if pool.release is not None:
        out["pool_release"] = pool.release
    if pool.joins:
        out["pool_history"] = [
            {
                "run": join.run,
                "release": join.release,
                "at": join.at,
                "from": join.before,
                "to": join.after,
                "p_worse": join.p_worse,
            }
            for join in pool.joins
        ]
    return out


def _is_counts(value: Any, pooled: int) -> bool:
    if not isinstance(value, list) or len(value) != 2:
        return False
    if any(isinstance(n, bool) or not isinstance(n, int) for n in value):
        return False
    passes, runs = value
    return 0 <= passes <= runs and 1 <= runs <= pooled


def _joins(fail: Callable[[str], InputError], value: Any) -> tuple[PoolJoin, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail(f"'pool_history' must be a list of joins, got {json_type(value)}")
    return tuple(_join(fail, item, n) for n, item in enumerate(value, start=1))


def _join(fail: Callable[[str], InputError], item: Any, n: int) -> PoolJoin:
    def bad(message: str) -> InputError:
        return fail(f"'pool_history' join {n}: {message}")

    if not isinstance(item, dict):
        raise bad(f"expected an object, got {json_type(item)}")
    if set(item) != set(JOIN_KEYS):
        unknown = sorted(set(item) - set(JOIN_KEYS))
        what = (
            f"unknown key '{unknown[0]}'"
            if unknown
            else f"missing key '{sorted(set(JOIN_KEYS) - set(item))[0]}'"
        )
        raise bad(f"{what} (a join has: {', '.join(JOIN_KEYS)})")
    run, release, at = item["run"], item["release"], item["at"]
    if run is not None and (not isinstance(run, str) or not run.strip()):
        raise bad(f"'run' must be a run id or null, got {describe(run)}")
    if not isinstance(release, str) or not release.strip():
        raise bad(f"'release' must be a non-empty string, got {describe(release)}")
    if not isinstance(at, str) or not _TIMESTAMP.fullmatch(at):
        raise bad(f"'at' must be a UTC time YYYY-MM-DDTHH:MM:SSZ, got {describe(at)}")
    shares = []
    for key in ("from", "to", "p_worse"):
        number = finite(item[key])
        if number is None or not 0.0 <= number <= 1.0:
            raise bad(f"'{key}' must be a number in [0, 1], got {describe(item[key])}")
        shares.append(number)
    return PoolJoin(run, release, at, *shares)
