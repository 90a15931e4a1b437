"""Replay the golden questions through a system under test and keep what it answered.

Every returned trace is validated against the trace contract before it is kept: a trace the contract
rejects — a field of the wrong type, or a string that is not text (a lone surrogate, which an HTTP SUT can
send as a ``\\ud800`` escape and the trace loader refuses) — is quarantined with the case id and the
offending field, and the case then counts as missing (an empty answer that fails), never silently dropped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ragspine_pipeline.contracts.jsonl import lone_surrogate
from ragspine_pipeline.contracts.trace import Trace
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import append_durably, jsonl_line, write_jsonl
from ragspine_pipeline.sources.errors import SourceError

log = logging.getLogger(__name__)

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
    reused: int  # answered by an earlier, interrupted replay and kept in the answer store
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
            f"{self.reused} kept from an earlier replay, {self.failed} failed, {self.elapsed_s:.0f} s"
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
    reused: int = 0  # answers an earlier, interrupted replay had stored
    elapsed_s: float = 0.0


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


class AnswerStore:
    """The answers of one SUT on one index, kept per case as they arrive.

    One JSON line per answered case, appended and fsynced as the answer comes back (a killed replay
    loses at most the answers in flight), keyed on the case's content (qid, question, reference
    date): a re-run asks only the cases without a kept answer, and a case whose text changed is asked
    again. Failures are not kept (a re-run asks them again). A torn last line (a crash mid-write) is
    skipped with a warning. The file's name carries the SUT's identity and the index version, so a
    changed SUT or a new index starts afresh.
    """

    def __init__(self, folder: str | Path, sut_identity: str, index_version: str | None) -> None:
        version = hashlib.sha256((index_version or "").encode()).hexdigest()[:12]
        self.path = Path(folder) / f"{sut_identity}-{version}.jsonl"
        self.index_version = index_version

    @staticmethod
    def key(qid: str, question: str, reference_date: str | None) -> str:
        text = json.dumps([qid, question, reference_date], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def load(self) -> dict[str, dict | None]:
        """Kept answers by case key (None: the SUT had no answer for the case)."""
        kept: dict[str, dict | None] = {}
        if not self.path.exists():
            return kept
        torn = 0
        with open(self.path, encoding="utf-8", errors="replace") as lines:
            for text in lines:
                try:
                    record = json.loads(text)
                    kept[record["key"]] = record["trace"]
                except (ValueError, KeyError, TypeError):
                    torn += 1
        if torn:
            log.warning("%s: %d unreadable line(s) skipped (a replay killed mid-write)", self.path, torn)
        return kept

    def add(self, key: str, qid: str, trace: dict | None) -> None:
        try:
            line = jsonl_line({"key": key, "qid": qid, "trace": trace}) + "\n"
        except ValueError:  # NaN or infinity, which JSON has not: the contract quarantines the trace
            return  # not kept: a re-run asks this case again
        try:
            append_durably(self.path, line.encode("utf-8"), "replay answers")
        except OSError as exc:
            raise InputError(str(self.path), f"cannot keep an answer: {exc.strerror or exc}") from None


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
    answer is kept as it arrives and a case already answered there is not asked again. A case the SUT
    cannot answer (its :class:`SourceError` after the client's retries) is a failure: when more than
    ``max_failed_share`` of the cases failed (0: any), :class:`ReplayFailed` names them; otherwise they
    are scored as missing and listed in ``Replay.failed``. ``progress`` is called every
    ``progress_every_s`` seconds while questions are in flight, and once at the end.
    """
    questions = list(questions)
    keys = [AnswerStore.key(*item) for item in questions]
    kept = store.load() if store is not None else {}
    traces: dict[int, dict | None] = {i: kept[key] for i, key in enumerate(keys) if key in kept}
    reused = len(traces)
    failed: dict[str, str] = {}
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
        trace = traces.get(i)
        if trace is None:
            continue
        trace = trace if _has_id(trace) else {**trace, "qid": qid}
        problem = _contract_problem(trace)
        if problem is None:
            kept_traces.append(trace)
        else:
            rejected.append({"qid": qid, **problem, "raw": _writable(trace)})
    for path, records, what in ((out, kept_traces, "golden traces"), (quarantine, rejected, "quarantine")):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(records, path, what, sort_keys=True)
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
