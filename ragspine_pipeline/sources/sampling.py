"""The daily production sample: one streaming pass over a day of traces, memory bounded by the sample.

Every line is read once. A line that is not a JSON object, fails the trace contract (SPEC §2.2) or has
no request id is quarantined with its source and line number and counted, never dropped silently.
Valid traces are de-duplicated by request id and the ``n`` with the smallest
``blake2b(f"{seed}:{request_id}")`` are kept. The result depends only on the lines and the seed, not on
how the store lists or splits them: among duplicates the one with the smallest content hash is kept, and
the sample is sorted by request id.

Lines are read a block at a time: ``sample_blocks.BlockReader`` parses a block as columns and vouches
for the traces it can check against the contract that way; every other line goes through the record
reader (``json.loads`` and the pydantic ``Trace``), which alone decides what is quarantined and why. A
trace is parsed into a record only when its priority could put it in the sample.

Stratified (``stratify="topic"``), each value of the trace's ``tags["topic"]`` is a stratum (no tag:
``"(none)"``). The pass keeps, per stratum, the ``max(n, floor)`` smallest priorities and counts the
stratum's distinct request ids; at the end ``strata.allocate`` splits ``n`` over the strata and each
stratum contributes its smallest priorities. A request id whose lines name different strata (a logging
fault) counts in each stratum's population, and is sampled only in the stratum whose kept lines hold its
smallest content hash (the others take their next priority instead); ``conflicts`` counts such ids.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
from pydantic import ValidationError

from ragspine_pipeline import inputs
from ragspine_pipeline.contracts.columns import explain_validation_error
from ragspine_pipeline.contracts.trace import TRACE_QID_ALIASES, Trace
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import atomic_writer
from ragspine_pipeline.sources.distinct import DistinctIds
from ragspine_pipeline.sources.sample_blocks import BlockReader, BlockTraces
from ragspine_pipeline.sources.strata import DEFAULT_FLOOR, NO_STRATUM, allocate
from ragspine_pipeline.sources.trace_store import RawLine, TraceStore, read_ahead

__all__ = [
    "QUARANTINE_REASONS",
    "DaySample",
    "Redactor",
    "jsonl_lines",
    "priority",
    "sample_day",
    "write_jsonl",
]

QUARANTINE_REASONS = ("invalid_json", "invalid_trace", "missing_request_id")
QUARANTINE_MAX_BYTES = 64 << 20
"""Bytes of quarantine entries written per pass; beyond it bad lines are counted, not kept."""

# A redaction hook: a kept record in, ``(redacted record, findings per kind)`` out.
Redactor = Callable[[dict], tuple[dict, Counter]]


@dataclass(frozen=True)
class DaySample:
    """The sampled records (raw JSON objects as read, sorted by request id) and what the pass saw.

    ``counts``: ``read`` non-blank lines, ``valid`` lines that passed the contract (duplicates included),
    ``duplicates`` valid lines whose request id came earlier, ``quarantined`` per reason (every reason
    present, 0 when none) and ``sampled``; with a redaction hook also ``redacted`` (findings per kind,
    sorted). ``quarantine_path`` is the file bad lines were appended to, None when there were none.

    ``allocation`` (stratified samples only): ``dimension``, ``floor``, ``seed``, ``n``, ``exceeded_n``
    (the floors alone exceeded ``n``), ``conflicts`` (request ids seen in several strata) and ``strata``:
    ``{stratum: {"population", "allocated", "sampled"}}`` sorted by stratum.
    """

    day: str
    records: list[dict]
    counts: dict[str, Any]
    quarantine_path: Path | None
    allocation: dict[str, Any] | None = None


def priority(seed: int, request_id: str) -> bytes:
    """The sampling priority of a request id: the sample keeps the smallest (compared as bytes)."""
    return hashlib.blake2b(f"{seed}:{request_id}".encode("utf-8", "surrogatepass"), digest_size=16).digest()


def sample_day(
    store: TraceStore,
    day: str,
    *,
    n: int,
    seed: int,
    quarantine: Path | None,
    stratify: str | None = None,
    floor: int = DEFAULT_FLOOR,
    redact: Redactor | None = None,
    redact_text: Callable[[str], str] | None = None,
    quarantine_max_bytes: int = QUARANTINE_MAX_BYTES,
) -> DaySample:
    """Sample ``n`` distinct traces of ``day`` from ``store`` in one pass (see the module docstring).

    Bad lines go to ``quarantine`` as JSON lines ``{source, line, reason, field, error, raw,
    raw_base64, raw_bytes}`` (see :func:`quarantine_entry`). The file is replaced when the pass
    completes (removed when no line was bad) and left as it was when the pass fails. Once
    ``quarantine_max_bytes`` are written, further bad lines are only counted (``quarantine_kept`` and
    ``quarantine_omitted`` in ``counts``; the counts per reason stay exact). With ``quarantine`` None
    they are only counted. ``stratify`` names a tag dimension to stratify on, with
    ``floor`` traces owed to each stratum (see ``strata.allocate``). ``redact``, when given, is applied
    to every sampled record (and only to those) before it is returned; ``redact_text`` to the raw
    text of every quarantined line before it is written.

    Memory: one block of lines (``trace_store.BLOCK_SIZE``) and the ``n`` kept records (stratified:
    ``max(n, floor)`` per stratum); the distinct counts spill to a temporary directory (12 bytes per
    trace) beyond half a million traces (``distinct.DistinctIds``).
    """
    if n < 0:
        raise ValueError(f"the sample size must be >= 0, got {n}")
    if floor < 0:
        raise ValueError(f"the floor must be >= 0, got {floor}")
    sampler = _Sampler(stratify, n if stratify is None else max(n, floor), seed)
    reader = BlockReader(stratify)
    quarantined = dict.fromkeys(QUARANTINE_REASONS, 0)
    read = valid = 0
    bad_lines = _Quarantine(None if quarantine is None else Path(quarantine), quarantine_max_bytes)
    with bad_lines, sampler:
        for block in read_ahead(store.iter_blocks(day)):
            traces = reader.read(block)
            sampler.offer_columns(traces)
            read += len(traces.lines) + len(traces.leftovers)
            valid += len(traces.lines)
            for line in traces.leftovers:  # the record reader's verdict, line by line
                outcome = _parse(line)
                if isinstance(outcome, _Bad):
                    quarantined[outcome.reason] += 1
                    bad_lines.append(quarantine_entry(line, outcome, redact_text))
                    continue
                valid += 1
                sampler.offer_record(*outcome)
            sampler.end_block()
        distinct_ids, populations = sampler.distinct_counts()
    allocation = None
    if stratify is None:
        records = sampler.sorted_records()
    else:
        records, allocation = sampler.select(n, floor, distinct_ids, populations)
    counts: dict[str, Any] = {
        "read": read,
        "valid": valid,
        "duplicates": valid - distinct_ids,
        "quarantined": quarantined,
        "sampled": len(records),
        "quarantine_kept": bad_lines.written,
        "quarantine_omitted": bad_lines.omitted,
    }
    if redact is not None:
        records, counts["redacted"] = _redact_all(records, redact)
    return DaySample(day, records, counts, bad_lines.path if bad_lines.written else None, allocation)


def jsonl_lines(records: Iterable[dict]) -> Iterator[str]:
    """Each record as one JSON line (with its ``\\n``); the same records give the same text."""
    for record in records:
        text = json.dumps(record, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from a \ud8xx escape: keep it escaped
            text = json.dumps(record)
        yield text + "\n"


def write_jsonl(records: list[dict], path: str | Path) -> None:
    """Write ``records`` one JSON object per line, atomically; the same records give the same bytes."""
    with atomic_writer(path, "trace sample") as fh:
        fh.writelines(jsonl_lines(records))


def _redact_all(records: list[dict], redact: Redactor) -> tuple[list[dict], dict[str, int]]:
    """The records through ``redact``, and the findings per kind summed over them (sorted by kind)."""
    found: Counter = Counter()
    redacted = []
    for record in records:
        clean, kinds = redact(record)
        redacted.append(clean)
        found.update(kinds)
    return redacted, dict(sorted(found.items()))


class _Quarantine:
    """Bad lines, written to a temporary file beside ``path`` (opened on the first one) that replaces
    ``path`` when the pass completes; a pass that fails leaves ``path`` as it was. Entries beyond
    ``max_bytes`` are counted, not written. With no path they are only counted."""

    def __init__(self, path: Path | None, max_bytes: int) -> None:
        if path is not None and (path.is_symlink() or path.exists()) and not path.is_file():
            raise InputError(str(path), "cannot write the quarantine: not a regular file")
        self.path = path
        self.max_bytes = max_bytes
        self.written = 0
        self.omitted = 0
        self.size = 0
        self._out: TextIO | None = None
        self._tmp: Path | None = None

    def append(self, entry: str) -> None:
        if self.path is None:
            return
        if self.size + len(entry) + 1 > self.max_bytes:
            self.omitted += 1
            return
        try:
            if self._out is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
                self._tmp = Path(tmp)
                self._out = os.fdopen(fd, "w", encoding="ascii")
            self._out.write(entry + "\n")
        except OSError as exc:
            raise InputError(str(self.path), f"cannot write the quarantine: {exc.strerror or exc}") from None
        self.written += 1
        self.size += len(entry) + 1

    def __enter__(self) -> _Quarantine:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if self.path is None:
            return
        try:
            if self._out is not None:
                self._out.close()
            if exc_type is not None:
                return
            if self._tmp is not None:
                os.replace(self._tmp, self.path)
                self._tmp = None
            elif self.path.is_file() or self.path.is_symlink():
                self.path.unlink()  # this pass found nothing bad: no stale file from an earlier one
        except OSError as exc:
            raise InputError(str(self.path), f"cannot write the quarantine: {exc.strerror or exc}") from None
        finally:
            if self._tmp is not None:
                self._tmp.unlink(missing_ok=True)


# -- one line ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bad:
    reason: str
    error: str
    field: str | None = None


def quarantine_entry(line: RawLine, bad: _Bad, redact_text: Callable[[str], str] | None = None) -> str:
    """One quarantine line (ASCII JSON): where the line was, why it was set aside, and what it held.

    ``raw_base64`` keeps the line's first ``inputs.KEEP_BYTES`` bytes losslessly (after redaction:
    free text in a bad line is as private as in a good one); ``raw`` is the same bytes as text when
    they are UTF-8 (else null), and ``raw_bytes`` the full length of the line.
    """
    text = line.text if redact_text is None else redact_text(line.text)
    data = text.encode("utf-8", "surrogateescape")
    length = line.oversize or len(line.text.encode("utf-8", "surrogateescape"))
    kept = data[: inputs.KEEP_BYTES]
    try:
        readable: str | None = kept.decode("utf-8")
    except UnicodeDecodeError:
        readable = None
    entry = {
        "source": line.source,
        "line": line.line_no,
        "reason": bad.reason,
        "field": bad.field,
        "error": bad.error,
        "raw": readable,
        "raw_base64": base64.b64encode(kept).decode("ascii"),
        "raw_bytes": length,
    }
    return json.dumps(entry)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse(line: RawLine) -> tuple[str, bytes, dict, dict[str, str] | None] | _Bad:
    """``(request_id, content_hash, record, tags)`` of a valid trace line, or why it is quarantined."""
    if line.oversize:
        return _Bad("invalid_json", inputs.too_long_message(line.oversize))
    text = line.text.strip()
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes, surrogate-escaped by the store
        return _Bad("invalid_json", f"not UTF-8 text: {exc.reason}")
    depth = inputs.nesting_depth(data)
    if depth > inputs.MAX_DEPTH:
        return _Bad("invalid_json", inputs.too_deep_message(depth))
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return _Bad("invalid_json", f"malformed JSON: {exc.msg} (column {exc.colno})")
    except ValueError as exc:  # NaN / Infinity: not JSON, and never a silent NaN downstream
        if "digits" in str(exc):  # an integer longer than Python converts
            return _Bad("invalid_json", "malformed JSON: a number has too many digits (at most 4,300)")
        return _Bad("invalid_json", f"malformed JSON: {exc}")
    except RecursionError:
        return _Bad("invalid_json", "malformed JSON: nested too deeply")
    if not isinstance(raw, dict):
        return _Bad("invalid_json", f"expected a JSON object, got {type(raw).__name__}")
    try:
        trace = Trace.model_validate(raw)
    except ValidationError as exc:
        # The contracts' own explanation of a validation error: the field, the reason, the value given.
        explained = explain_validation_error(exc, line.source, line.line_no, raw, TRACE_QID_ALIASES)
        return _Bad("invalid_trace", explained.message, explained.field)
    if trace.qid is None or not trace.qid.strip():
        return _Bad("missing_request_id", "a production trace needs a request id (request_id or qid)", "qid")
    return trace.qid, hashlib.blake2b(data, digest_size=16).digest(), raw, trace.tags


# -- the sample --------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Kept:
    key: tuple[bytes, str]  # (priority, request id): a total order even if two priorities collide
    content: bytes
    record: dict

    def __lt__(self, other: _Kept) -> bool:
        return self.key > other.key  # heapq is a min-heap; the root must be the worst kept record


class _Smallest:
    """The ``n`` distinct request ids of smallest key seen so far, each with its smallest-content record.

    Exact in O(n) memory: an id that is not kept when first seen, or is evicted later, can never return,
    because the worst kept key only decreases; so every occurrence of a finally kept id was compared.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self._heap: list[_Kept] = []
        self._by_id: dict[str, _Kept] = {}

    def bound(self) -> bytes | None:
        """A priority above which nothing is kept (None: anything may be): every kept id and every id
        that would enter has a priority ``<=`` it."""
        if len(self._heap) < self.n:
            return None
        return self._heap[0].key[0] if self._heap else b""

    def offer(self, request_id: str, prio: bytes, content: bytes, record: dict) -> None:
        kept = self._by_id.get(request_id)
        if kept is not None:
            if content < kept.content:
                kept.content, kept.record = content, record
            return
        if self.n == 0:
            return
        candidate = _Kept((prio, request_id), content, record)
        if len(self._heap) < self.n:
            heapq.heappush(self._heap, candidate)
        elif candidate.key < self._heap[0].key:
            del self._by_id[heapq.heapreplace(self._heap, candidate).key[1]]
        else:
            return
        self._by_id[request_id] = candidate

    def sorted_records(self) -> list[dict]:
        return [self._by_id[request_id].record for request_id in sorted(self._by_id)]

    def smallest(self, k: int) -> list[_Kept]:
        """The ``k`` kept entries of smallest key, smallest first."""
        return sorted(self._heap, key=lambda kept: kept.key)[:k]


class _Sampler:
    """A :class:`_Smallest` per stratum (one, ``NO_STRATUM``, when not stratifying) and the distinct
    counts of the request ids offered, overall and per stratum."""

    def __init__(self, dimension: str | None, capacity: int, seed: int) -> None:
        self.dimension = dimension
        self.capacity = capacity
        self.seed = seed
        self._kept: dict[str, _Smallest] = {}
        self._codes: dict[str, int] = {}
        self._by_code: list[_Smallest] = []
        self._distinct = DistinctIds()
        self._pending: list[tuple[bytes, int]] = []  # record-reader traces of this block

    def __enter__(self) -> _Sampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._distinct.__exit__(*exc_info)

    def _stratum(self, value: str | None) -> tuple[_Smallest, int]:
        stratum = NO_STRATUM if value is None else value
        kept = self._kept.get(stratum)
        if kept is None:
            kept = self._kept[stratum] = _Smallest(self.capacity)
            self._codes[stratum] = len(self._codes)
            self._by_code.append(kept)
        return kept, self._codes[stratum]

    def offer_columns(self, traces: BlockTraces) -> None:
        """Offer the traces the columnar reader vouched for. A trace is compared, hashed and parsed into a
        record only when its priority is within its stratum's bound (a few thousand per day): the bound
        test runs over the block's 64-bit priority prefixes at once."""
        prios = [priority(self.seed, request_id) for request_id in traces.request_ids]
        if not prios:
            return
        prefixes = _digests(prios)
        codes = self._codes_of(traces.strata, len(prios))
        bounds = np.array([_prefix(kept.bound()) for kept in self._by_code], dtype=np.uint64)
        for i in np.flatnonzero(prefixes <= bounds[codes]).tolist():
            kept, line = self._by_code[codes[i]], traces.lines[i]
            content = hashlib.blake2b(line, digest_size=16).digest()
            record = json.loads(line, parse_constant=_reject_constant)
            kept.offer(traces.request_ids[i], prios[i], content, record)
        self._distinct.add(prefixes, codes)

    def _codes_of(self, strata: pa.Array | None, n: int) -> np.ndarray:
        """The stratum code of each trace (one dictionary lookup per distinct tag value of the block)."""
        if self.dimension is None or strata is None:
            return np.full(n, self._stratum(None)[1], dtype=np.uint32)
        encoded = strata.dictionary_encode()
        values = [*encoded.dictionary.to_pylist(), None]  # the last code: no tag
        indices = encoded.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
        local = np.zeros(len(values), dtype=np.uint32)
        for index in np.unique(indices).tolist():  # only the values present: a stratum is never empty
            local[index] = self._stratum(values[index])[1]
        return local[indices]

    def offer_record(
        self, request_id: str, content: bytes, record: dict, tags: dict[str, str] | None
    ) -> None:
        """Offer a trace the record reader validated."""
        value = None if self.dimension is None or tags is None else tags.get(self.dimension)
        kept, code = self._stratum(value)
        prio = priority(self.seed, request_id)
        kept.offer(request_id, prio, content, record)
        self._pending.append((prio, code))

    def end_block(self) -> None:
        if self._pending:
            prios, codes = zip(*self._pending, strict=True)
            self._distinct.add(_digests(list(prios)), np.array(codes, dtype=np.uint32))
            self._pending = []

    def distinct_counts(self) -> tuple[int, dict[str, int]]:
        """Distinct request ids overall, and per stratum (sorted by stratum)."""
        distinct, per_code = self._distinct.counts(len(self._codes))
        return distinct, {stratum: int(per_code[self._codes[stratum]]) for stratum in sorted(self._codes)}

    def sorted_records(self) -> list[dict]:
        return [] if not self._kept else next(iter(self._kept.values())).sorted_records()

    def select(
        self, n: int, floor: int, distinct_ids: int, populations: dict[str, int]
    ) -> tuple[list[dict], dict[str, Any]]:
        """The stratified sample sorted by request id, and its allocation (see :class:`DaySample`)."""
        allocated, exceeded = allocate(populations, n, floor)
        ranked = {stratum: self._kept[stratum].smallest(self.capacity) for stratum in populations}
        # A request id kept in several strata belongs to the one holding its smallest content hash; the
        # others skip it and take their next priority, so a conflict does not shrink the sample.
        owner: dict[str, tuple[bytes, str]] = {}
        for stratum, entries in ranked.items():
            for kept in entries:
                owner[kept.key[1]] = min(
                    owner.get(kept.key[1], (kept.content, stratum)), (kept.content, stratum)
                )
        chosen: dict[str, dict] = {}
        sampled: dict[str, int] = {}
        for stratum, entries in ranked.items():
            mine = [kept for kept in entries if owner[kept.key[1]][1] == stratum][: allocated[stratum]]
            chosen.update((kept.key[1], kept.record) for kept in mine)
            sampled[stratum] = len(mine)
        allocation = {
            "dimension": self.dimension,
            "floor": floor,
            "seed": self.seed,
            "n": n,
            "exceeded_n": exceeded,
            "conflicts": sum(populations.values()) - distinct_ids,
            "strata": {
                stratum: {"population": size, "allocated": allocated[stratum], "sampled": sampled[stratum]}
                for stratum, size in populations.items()
            },
        }
        return [chosen[request_id] for request_id in sorted(chosen)], allocation


def _digests(prios: list[bytes]) -> np.ndarray:
    """The 64-bit digest of each request id for the distinct counts: the first 8 bytes of its priority."""
    return np.frombuffer(b"".join(prios), dtype=">u8")[::2].astype(np.uint64)


def _prefix(bound: bytes | None) -> int:
    """A stratum's bound as a 64-bit prefix: every priority ``<=`` the bound has a prefix ``<=`` this."""
    if bound is None:
        return (1 << 64) - 1
    return int.from_bytes(bound[:8].ljust(8, b"\0"), "big")
