"""Per-case outcomes of a run, and the canary checks read from them: the golden cases a team marks as
known good (``expect: releasable``) or known bad (``expect: blocked``) must come out that way."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.metrics import MetricResult, names
from ragspine_pipeline.scoring.grounded import GroundedScore, right_outcome
from ragspine_pipeline.scoring.layered import LayeredScore

CANARIES = names("canary")  # see :func:`canaries`


def case_outcomes(grounded: GroundedScore, layered: LayeredScore | None) -> dict[str, bool]:
    """``{case id: passed}``: releasable with an evidence registry, else a label of ``OK`` or
    ``REFUSAL_OK``."""
    if layered is not None:
        cases = layered.cases
        passed = cases.column("releasable").to_pylist()
    else:
        cases = grounded.cases
        passed = right_outcome(cases).to_pylist()
    return dict(zip(cases.column("qid").to_pylist(), (bool(p) for p in passed), strict=True))


def canary_rows(
    gold: pa.Table, grounded: GroundedScore, layered: LayeredScore | None
) -> list[tuple[str, str, bool]]:
    """``(case id, expect, passed)`` of the golden set's canaries (cases with ``expect``), in gold order;
    passed as in :func:`case_outcomes`. Only the canary rows are read: a golden set without canaries
    costs one null count."""
    if "expect" not in gold.column_names or gold.column("expect").null_count == gold.num_rows:
        return []
    expect = gold.column("expect").combine_chunks()
    rows = pc.indices_nonzero(expect.is_valid())
    ids = gold.column("qid").combine_chunks().take(rows)
    if layered is not None:
        cases, passed = layered.cases, layered.cases.column("releasable")
    else:
        cases = grounded.cases
        passed = right_outcome(cases)
    at = pc.index_in(ids, value_set=cases.column("qid").combine_chunks())
    flags = pc.fill_null(passed.combine_chunks().take(at), False).to_pylist()
    return list(zip(ids.to_pylist(), expect.take(rows).to_pylist(), flags, strict=True))


def canaries(rows: list[tuple[str, str, bool]]) -> dict[str, MetricResult]:
    """The canary checks (:func:`canary_rows`): ``known_good_released`` (of the cases expected
    releasable, the share that passed) and ``known_bad_blocked`` (of those expected blocked, the share
    that did not); only the checks with cases. Each is gated at 1.0: one canary out the wrong way blocks
    the release."""
    out = {}
    for check, wanted in zip(CANARIES, ("releasable", "blocked"), strict=True):
        right = [passed == (wanted == "releasable") for _, expect, passed in rows if expect == wanted]
        if right:
            out[check] = MetricResult(check, sum(right) / len(right), sum(right), len(right))
    return out


def canary_cases(rows: list[tuple[str, str, bool]]) -> list[dict]:
    """The canaries that came out the wrong way: ``{id, expect, outcome}`` in gold order."""
    return [
        {"id": qid, "expect": expect, "outcome": "releasable" if passed else "blocked"}
        for qid, expect, passed in rows
        if passed != (expect == "releasable")
    ]


def with_wrong_canaries(causes: dict, rows: list[tuple[str, str, bool]]) -> dict:
    """``causes`` with the canaries that came out the wrong way (:func:`canary_cases`), when any did."""
    wrong = canary_cases(rows)
    return {**causes, "wrong_canaries": wrong} if wrong else causes
