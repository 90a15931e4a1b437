"""Per-case flakiness: the golden set replayed several times against the same system under test.

A system that samples can pass a case on one replay and fail it on the next. Replaying the golden set N
times and counting, per case, the replays it passed shows which cases are flaky (passed on some replays,
not all) and how far the pass rate moves between identical runs — what tells a team whether to judge its
releases with the strict baseline rule or the paired one (``decision.paired``). The first replay is the
run's evaluation; the others only count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

SHOWN = 20  # flaky cases listed by id (the most even split first)


def flakiness(outcomes: Sequence[Mapping[str, bool]]) -> dict:
    """Per-case outcomes of N replays (``[{case id: passed}, …]``, the first being the run's) →
    ``{repeats, cases, flaky, pass_rates, flaky_cases: [{qid, passed, of}]}``.

    Only cases present in every replay count; ``pass_rates`` is each replay's pass rate over them, and
    ``flaky_cases`` lists at most :data:`SHOWN` of the flaky ones, those closest to an even split first,
    then by id.
    """
    if not outcomes:
        raise ValueError("flakiness needs at least one replay")
    common = sorted(set.intersection(*(set(replay) for replay in outcomes)))
    passes = {qid: sum(bool(replay[qid]) for replay in outcomes) for qid in common}
    repeats = len(outcomes)
    flaky = [qid for qid in common if 0 < passes[qid] < repeats]
    flaky.sort(key=lambda qid: (abs(2 * passes[qid] - repeats), qid))
    return {
        "repeats": repeats,
        "cases": len(common),
        "flaky": len(flaky),
        "pass_rates": [
            sum(bool(replay[qid]) for qid in common) / len(common) if common else 0.0 for replay in outcomes
        ],
        "flaky_cases": [{"qid": qid, "passed": passes[qid], "of": repeats} for qid in flaky[:SHOWN]],
    }


def flakiness_sentence(report: Mapping) -> str:
    """One line for people: ``7 of 84 cases are flaky over 3 replays (pass rate 0.8690–0.9048)``."""
    rates = report["pass_rates"]
    return (
        f"{report['flaky']} of {report['cases']} cases are flaky over {report['repeats']} replays "
        f"(pass rate {min(rates):.4f}–{max(rates):.4f})"
    )
