"""Replay the golden questions through a system under test and keep what it answered.

Every returned trace is validated against the trace contract before it is kept: a trace the contract
rejects — a field of the wrong type, or a string that is not text (a lone surrogate, which an HTTP SUT can
send as a ``\\ud800`` escape and the trace loader refuses) — is quarantined with the case id and the
offending field, and the case then counts as missing (an empty answer that fails), never silently dropped.

Answers kept by an earlier attempt (``sources.answer_store``) are taken instead of asking again only
within the store's scope, and every one is counted by the replay that stored it (``Replay.reused_from``),
so that the decision names each reuse.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ragspine_pipeline.contracts.jsonl import lone_surrogate
from ragspine_pipeline.contracts.trace import Trace
from ragspine_pipeline.files import atomic_output, jsonl_lines
from ragspine_pipeline.sources.answer_store import AnswerStore, Reuse, reuses
from ragspine_pipeline.sources.errors import RefusedReply, SourceError

Answer = Callable[[str, str, str | None], dict | None]
"""``answer(qid, question, reference_date)``: one raw trace (``contracts.trace``), or None when the SUT
has no answer for the case (``reference_date``, ISO or None, is the case's "today" for relative
periods). A case the SUT cannot answer (unreachable after its retries) raises :class:`SourceError`."""

Question = tuple[str, str, str | None]


@dataclass(frozen=True)
class Progress:
    """Where a replay stands: shown in the run's log every few seconds and as run metadata."""

    total: int
    answered: int  # answered in this replay (None answers and quarantined ones included)
    reused: int  # answered by an earlier attempt and taken from the answer store
    failed: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Answers a second in this replay."""
        return self.answered / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def line(self) -> str:
        done = self.answered + self.reused + self.failed
        return (
            f"replay {done}/{self.total}: {self.answered} answered ({self.rate:.1f}/s), "
            f"{self.reused} reused from an earlier replay, {self.failed} failed, {self.elapsed_s:.0f} s"
        )


@dataclass(frozen=True)
class Replay:
    asked: int
    answered: int
    unanswered: int  # the SUT had no answer (None): scored as missing
    quarantined: int  # the SUT answered with a trace the contract rejects: scored as missing
    traces_path: Path
    quarantine_path: Path
    failed: dict[str, str] = field(default_factory=dict)  # qid -> cause: could not be asked, scored missing
    reused: int = 0  # answers taken from the answer store instead of asking
    elapsed_s: float = 0.0
    reused_from: tuple[Reuse, ...] = ()  # the reused answers, counted by the replay that stored them
    traces_sha256: str = ""  # of the traces file as written


class ReplayFailed(SourceError):
    """More of the golden set than allowed could not be asked: the replay is no evaluation. Names the
    failed share, the allowed share and the first failed cases with their causes."""

    def __init__(self, location: str, failed: dict[str, str], asked: int, allowed: float) -> None:
        shown = "; ".join(f"{qid}: {cause}" for qid, cause in list(failed.items())[:5])
        more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
        super().__init__(
            location,
            f"{len(failed)} of {asked} case(s) failed, more than the {allowed:.0%} allowed: {shown}{more}",
        )
        self.failed = failed


def replay(
    questions: Iterable[Question],
    answer: Answer,
    *,
    out: Path,
    quarantine: Path,
    concurrency: int = 1,
    store: AnswerStore | None = None,
    max_failed_share: float = 0.0,
    where: str = "the SUT",
    progress: Callable[[Progress], None] | None = None,
    progress_every_s: float = 5.0,
) -> Replay:
    """Ask every ``(qid, question, reference_date)``, write the valid traces to ``out`` (JSONL, in order).

    Up to ``concurrency`` questions are in flight (an HTTP SUT is I/O bound). With a ``store``, every
    answer is kept as it arrives and a case the store already answers (within its scope) is not asked
    again: ``Replay.reused_from`` names the replays whose answers were taken. A case the SUT
    cannot answer (its :class:`SourceError` after the client's retries) is a failure: when more than
    ``max_failed_share`` of the cases failed (0: any), :class:`ReplayFailed` names them; otherwise they
    are scored as missing and listed in ``Replay.failed``. ``progress`` is called every
    ``progress_every_s`` seconds while questions are in flight, and once at the end.
    """
    questions = list(questions)
    keys = [AnswerStore.key(*item) for item in questions]
    kept = store.load() if store is not None else {}
    # A kept answer is taken only for the case it was kept for (its key says the case; its qid checks it).
    taken = {
        i: kept[key] for i, key in enumerate(keys) if key in kept and kept[key].qid in (None, questions[i][0])
    }
    traces: dict[int, dict | None] = {i: answer.trace for i, answer in taken.items()}
    reused = len(traces)
    failed: dict[str, str] = {}
    refused: dict[int, str] = {}
    started = time.monotonic()
    last_report = started

    def report() -> None:
        if progress is not None:
            answered = len(traces) - reused
            progress(Progress(len(questions), answered, reused, len(failed), time.monotonic() - started))

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        pending: dict[Future, int] = {
            pool.submit(answer, *questions[i]): i for i in range(len(questions)) if i not in traces
        }
        while pending:
            done, _ = wait(pending, timeout=progress_every_s, return_when=FIRST_COMPLETED)
            for future in done:
                i = pending.pop(future)
                qid = questions[i][0]
                try:
                    trace = future.result()
                except RefusedReply as exc:  # answered, unreadably: quarantined below, never kept
                    refused[i] = exc.cause
                    continue
                except SourceError as exc:
                    failed[qid] = exc.cause
                    continue
                traces[i] = trace
                if store is not None:
                    store.add(keys[i], qid, trace)
            if time.monotonic() - last_report >= progress_every_s:
                last_report = time.monotonic()
                report()
    report()
    if failed and len(failed) > max_failed_share * len(questions):
        raise ReplayFailed(where, failed, len(questions), max_failed_share)
    kept_traces, rejected = [], []
    for i, (qid, *_asked) in enumerate(questions):
        if i in refused:
            rejected.append({"qid": qid, "reason": "invalid_json", "field": None, "error": refused[i]})
            continue
        trace = traces.get(i)
        if trace is None:
            continue
        trace = trace if _has_id(trace) else {**trace, "qid": qid}
        problem = _contract_problem(trace)
        if problem is None:
            kept_traces.append(trace)
        else:
            rejected.append({"qid": qid, **problem, "raw": _writable(trace)})
    digests = {}
    for path, records, what in ((out, kept_traces, "golden traces"), (quarantine, rejected, "quarantine")):
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(jsonl_lines(records, path, sort_keys=True)).encode("utf-8")
        with atomic_output(path, what) as written:
            written.write(data)
        digests[path] = hashlib.sha256(data).hexdigest()  # what a replay record vouches for
    unanswered = sum(1 for i in traces if traces[i] is None)
    return Replay(
        len(questions),
        len(kept_traces),
        unanswered,
        len(rejected),
        out,
        quarantine,
        failed=failed,
        reused=reused,
        elapsed_s=time.monotonic() - started,
        reused_from=reuses(taken.values()),
        traces_sha256=digests[out],
    )


def failure_warnings(failed: dict[str, str]) -> list[str]:
    """What a decision says of the cases its replay could not ask (scored as missing)."""
    if not failed:
        return []
    shown = "; ".join(f"{qid} ({cause})" for qid, cause in sorted(failed.items())[:10])
    more = f"; and {len(failed) - 10} more" if len(failed) > 10 else ""
    return [f"{len(failed)} case(s) could not be asked of the SUT and are scored as missing: {shown}{more}"]


def _writable(value):
    """``value`` with every non-finite number as its text (``"nan"``): JSON has no NaN, and a quarantine
    keeps what was received."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_writable(item) for item in value]
    if isinstance(value, dict):
        return {key: _writable(item) for key, item in value.items()}
    return value


def _not_finite(value, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinite number in ``value`` ("" at the top), else None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _not_finite(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _has_id(trace: dict) -> bool:
    return any(trace.get(key) is not None for key in ("qid", "q_id", "case_id", "id", "request_id"))


def _contract_problem(trace: dict) -> dict | None:
    try:
        Trace.model_validate(trace)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        return {"reason": "invalid_trace", "field": field, "error": error["msg"]}
    where = _not_finite(trace)
    if where is not None:  # in any field, read or not: no JSON writer or reader downstream takes it
        return {"reason": "invalid_trace", "field": where or None, "error": "a NaN or infinite number"}
    found = lone_surrogate(trace)
    if found is not None:
        field, code = found
        return {
            "reason": "invalid_trace",
            "field": field or None,
            "error": f"a lone surrogate ({code}) is not text",
        }
    return None
