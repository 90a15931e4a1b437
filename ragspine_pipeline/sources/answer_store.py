"""The answers a replay keeps as they arrive, and which replay kept each: what lets an interrupted
replay resume without ever passing one release's answers off as another's.

A stored answer belongs to one release of one service: its SUT identity (every setting its answers
depend on, ``sources.sut``), index version and release; no answer is ever reused for another. Within
that key, a re-run resumes one replay, ``within``: a Dagster run (its root run: a step retry or a
re-execution from failure resumes it, a new run asks again), or a command's own replay when neither a
release nor an index version says whose answers they are; None is every replay of the key
(``ragspine-eval replay`` run again with the same ``--release``). Reuse across replays of the key is
explicit (``reuse_earlier``): then the latest answer any of them kept is taken where this replay has
none. On disk::

    <folder>/<sut identity>-<hash of index version and release>/<hash of within>.jsonl

Every line names the replay that stored it (its id, start time and release), so that every reuse is
named: "37 answers reused from replay <id> of <time>".
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import append_durably, jsonl_line

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stamp:
    """Which replay stored an answer: its id, when it started (ISO 8601, UTC, to the millisecond: the
    order of replays) and its release."""

    replay: str
    started: str
    release: str | None = None

    @classmethod
    def new(cls, release: str | None = None, replay: str | None = None) -> Stamp:
        """A replay starting now; ``replay`` is its id (default: a new one, its start time and a random
        part, as ``20261128T101500Z-3f9a1c2e``)."""
        now = datetime.now(UTC)
        started = f"{now:%Y-%m-%dT%H:%M:%S}.{now.microsecond // 1000:03d}Z"
        return cls(replay or f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}", started, release)


@dataclass(frozen=True)
class Kept:
    """A stored answer (None: the SUT had no answer for the case) and the replay that stored it."""

    trace: dict | None
    stamp: Stamp
    qid: str | None = None  # the case it was kept for (None in a line of an older store)


@dataclass(frozen=True)
class Reuse:
    """Answers one earlier replay stored that this replay took instead of asking the SUT."""

    replay: str
    started: str
    release: str | None
    answers: int

    def sentence(self) -> str:
        answers = "1 answer" if self.answers == 1 else f"{self.answers} answers"
        release = f" (release {self.release})" if self.release else ""
        return f"{answers} reused from replay {self.replay} of {self.started}{release}"


def reuse_warnings(reuses: Iterable[Reuse | Mapping]) -> list[str]:
    """What a decision says of the answers its replay reused rather than asked: one line per replay
    that stored them (a mapping is a :class:`Reuse` as a dict, as a replay record or a Dagster step
    hands it on)."""
    return [(reuse if isinstance(reuse, Reuse) else Reuse(**reuse)).sentence() for reuse in reuses]


class AnswerStore:
    """The answers of one release of one SUT on one index, kept per case as they arrive by the replay
    ``within`` (see above).

    One JSON line per answered case, appended and fsynced as the answer comes back (a killed replay
    loses at most the answers in flight), keyed on the case's content (qid, question, reference date):
    a re-run asks only the cases without a kept answer, and a case whose text changed is asked again.
    Failures are not kept (a re-run asks them again). A torn last line (a crash mid-write) is skipped
    with a warning. ``stamp`` is the replay storing answers now (default: a new one, of no release).
    """

    def __init__(
        self,
        folder: str | Path,
        sut_identity: str,
        index_version: str | None,
        stamp: Stamp | None = None,
        *,
        within: str | None = None,
        reuse_earlier: bool = False,
    ) -> None:
        stamp = stamp or Stamp.new()
        key = _digest(json.dumps([index_version, stamp.release]))[:12]
        self.folder = Path(folder) / f"{sut_identity}-{key}"
        self.path = self.folder / f"{_digest(json.dumps(within))[:16]}.jsonl"
        self.index_version = index_version
        self.stamp = stamp
        self.reuse_earlier = reuse_earlier

    @staticmethod
    def key(qid: str, question: str, reference_date: str | None) -> str:
        text = json.dumps([qid, question, reference_date], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def load(self) -> dict[str, Kept]:
        """Kept answers by case key: this replay's, and with ``reuse_earlier`` the other replays' of
        the same release of the SUT on the index too (the latest a case has where this replay has none)."""
        kept: dict[str, Kept] = {}
        if self.reuse_earlier and self.folder.is_dir():
            others = [path for path in sorted(self.folder.glob("*.jsonl")) if path != self.path]
            earlier = [item for path in others for item in self._read(path)]
            for key, answer in sorted(earlier, key=lambda item: item[1].stamp.started):
                kept[key] = answer  # the latest wins
        kept.update(self._read(self.path))
        return kept

    def add(self, key: str, qid: str, trace: dict | None) -> None:
        stamp = self.stamp
        record = {"key": key, "qid": qid, "trace": trace, "replay": stamp.replay, "started": stamp.started}
        try:
            line = jsonl_line({**record, "release": stamp.release}) + "\n"
        except ValueError:  # NaN or infinity, which JSON has not: the contract quarantines the trace
            return  # not kept: a re-run asks this case again
        try:
            append_durably(self.path, line.encode("utf-8"), "replay answers")
        except OSError as exc:
            raise InputError(str(self.path), f"cannot keep an answer: {exc.strerror or exc}") from None

    @staticmethod
    def _read(path: Path) -> list[tuple[str, Kept]]:
        if not path.exists():
            return []
        found, torn = [], 0
        with open(path, encoding="utf-8", errors="replace") as lines:
            for text in lines:
                try:
                    found.append(_kept(text))
                except (InputError, ValueError, KeyError, TypeError, RecursionError):
                    torn += 1
        if torn:
            log.warning(
                "%s: %d unreadable line(s) skipped, asked again (a replay killed mid-write, or an edit)",
                path,
                torn,
            )
        return found


def _kept(text: str) -> tuple[str, Kept]:
    """One store line as the live path would have kept it: a key, a trace that is an object (or null for
    no answer) with only finite numbers and, when it names its case, the case it was kept for; a
    ValueError (or KeyError, TypeError) otherwise."""
    record = inputs.loads(text, "answer store", parse_constant=_not_a_number)
    if not isinstance(record, dict) or not isinstance(record["key"], str):
        raise ValueError("not a kept answer")
    trace, qid = record["trace"], record.get("qid")
    if trace is not None and not isinstance(trace, dict):
        raise ValueError("a kept trace is an object")
    named = None if trace is None else trace.get("qid")
    if qid is not None and named is not None and str(named) != str(qid):
        raise ValueError("kept for one case, naming another")
    stamp = Stamp(str(record["replay"]), str(record["started"]), record.get("release"))
    return record["key"], Kept(trace, stamp, None if qid is None else str(qid))


def _not_a_number(name: str) -> None:
    raise ValueError(f"{name} in a kept answer")


def reuses(kept: Iterable[Kept]) -> tuple[Reuse, ...]:
    """The answers in ``kept`` counted by the replay that stored them, oldest replay first."""
    counts: dict[Stamp, int] = {}
    for answer in kept:
        counts[answer.stamp] = counts.get(answer.stamp, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (item[0].started, item[0].replay))
    return tuple(Reuse(stamp.replay, stamp.started, stamp.release, n) for stamp, n in ordered)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
