"""Replay the golden questions through a system under test and keep what it answered.

Every returned trace is validated against the trace contract before it is kept: a trace the contract
rejects is quarantined with the case id and the offending field, and the case then counts as missing
(an empty answer that fails), never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ragspine_pipeline.contracts.trace import Trace
from ragspine_pipeline.files import atomic_writer

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
    _write_jsonl(out, kept, "golden traces")
    _write_jsonl(quarantine, rejected, "quarantine")
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
    return None


def _write_jsonl(path: Path, records: list[dict], what: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path, what) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
