"""Replay the golden questions through a system under test and keep what it answered.

Every returned trace is validated against the trace contract before it is kept: a trace the contract
rejects — a field of the wrong type, or a string that is not text (a lone surrogate, which an HTTP SUT can
send as a ``\\ud800`` escape and the trace loader refuses) — is quarantined with the case id and the
offending field, and the case then counts as missing (an empty answer that fails), never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ragspine_pipeline.contracts.jsonl import lone_surrogate
from ragspine_pipeline.contracts.trace import Trace
from ragspine_pipeline.files import write_jsonl

Answer = Callable[[str, str, str | None], dict | None]
"""``answer(qid, question, reference_date)``: one raw trace (``contracts.trace``), or None when the SUT
has no answer for the case (``reference_date``, ISO or None, is the case's "today" for relative
periods)."""


@dataclass(frozen=True)
class Replay:
    asked: int
    answered: int
    unanswered: int  # the SUT had no answer (None): scored as missing
    quarantined: int  # the SUT answered with a trace the contract rejects: scored as missing
    traces_path: Path
    quarantine_path: Path


def replay(
    questions: Iterable[tuple[str, str, str | None]],
    answer: Answer,
    *,
    out: Path,
    quarantine: Path,
    concurrency: int = 1,
) -> Replay:
    """Ask every ``(qid, question, reference_date)``, write the valid traces to ``out`` (JSONL, in order).

    Up to ``concurrency`` questions are in flight (an HTTP SUT is I/O bound); an exception from the SUT
    (unreachable after its retries) propagates: a replay with holes is not an evaluation.
    """
    questions = list(questions)
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        traces = list(pool.map(lambda item: answer(*item), questions))
    kept, rejected = [], []
    for (qid, *_asked), trace in zip(questions, traces, strict=True):
        if trace is None:
            continue
        trace = trace if _has_id(trace) else {**trace, "qid": qid}
        problem = _contract_problem(trace)
        if problem is None:
            kept.append(trace)
        else:
            rejected.append({"qid": qid, **problem, "raw": trace})
    for path, records, what in ((out, kept, "golden traces"), (quarantine, rejected, "quarantine")):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(records, path, what, sort_keys=True)
    unanswered = sum(trace is None for trace in traces)
    return Replay(len(questions), len(kept), unanswered, len(rejected), out, quarantine)


def _has_id(trace: dict) -> bool:
    return any(trace.get(key) is not None for key in ("qid", "q_id", "case_id", "id", "request_id"))


def _contract_problem(trace: dict) -> dict | None:
    try:
        Trace.model_validate(trace)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        return {"reason": "invalid_trace", "field": field, "error": error["msg"]}
    found = lone_surrogate(trace)
    if found is not None:
        field, code = found
        return {
            "reason": "invalid_trace",
            "field": field or None,
            "error": f"a lone surrogate ({code}) is not text",
        }
    return None
