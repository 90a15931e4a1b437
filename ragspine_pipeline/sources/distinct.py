"""Exact distinct counts of request ids over a day, overall and per stratum, in bounded memory.

A day may be read in several shards (``shards.py``), so counting has two halves:

* :class:`DistinctIds` records what one pass sees: each occurrence as a 64-bit digest of its request
  id and a stratum code (12 bytes). Up to ``buffer_entries`` occurrences are held in memory; beyond
  that they are spilled to a temporary directory in 256 partitions by the digest's top byte, so memory
  is bounded whatever the pass's volume (disk takes 12 bytes per occurrence until the pass ends). At the
  end, :meth:`DistinctIds.unique_pairs` gives the pass's distinct ``(digest, stratum)`` pairs sorted by
  digest: what a shard hands on, one partition sorted at a time.
* :class:`DigestUnion` counts over the pairs of several passes: distinct digests over their union (a
  request id seen by two shards counts once) and distinct digests per stratum, one top-byte partition
  at a time (see the class for its memory).

Two distinct ids share a 64-bit digest with probability about d²/2⁶⁵ for d ids (3·10⁻⁶ at ten million,
3·10⁻⁴ at a hundred million), which would count one duplicate too many; the sample itself is keyed
by the full id.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

__all__ = ["DigestUnion", "DistinctIds"]

_ENTRY = np.dtype([("digest", "<u8"), ("stratum", "<u4")])
_PARTITION_BITS = 8
_PARTITIONS = 1 << _PARTITION_BITS
# The first digest of partitions 1..255 (partition 0 starts at 0, the last ends at the array's end).
_STARTS = np.arange(1, _PARTITIONS, dtype=np.uint64) << np.uint64(64 - _PARTITION_BITS)


class _Spill:
    """Partition files under a temporary directory (created on the first write, removed on close)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._dir: tempfile.TemporaryDirectory | None = None

    @property
    def used(self) -> bool:
        return self._dir is not None

    def append(self, part: int, entries: np.ndarray) -> None:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix=self.prefix)
        with open(Path(self._dir.name) / f"{part:03d}.bin", "ab") as fh:
            entries.tofile(fh)

    def read(self, part: int) -> np.ndarray | None:
        path = None if self._dir is None else Path(self._dir.name) / f"{part:03d}.bin"
        return np.fromfile(path, dtype=_ENTRY) if path is not None and path.exists() else None

    def close(self) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


class DistinctIds:
    """The occurrences one pass sees; use as a context manager (the spill directory is removed on
    exit)."""

    def __init__(self, buffer_entries: int = 1 << 19) -> None:
        self.buffer_entries = buffer_entries
        self._buffered: list[np.ndarray] = []
        self._buffered_size = 0
        self._added = 0
        self._spill = _Spill("ragspine-distinct-")

    def __enter__(self) -> DistinctIds:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._spill.close()

    def add(self, digests: np.ndarray, strata: np.ndarray | int = 0) -> None:
        """Record occurrences: ``digests`` (uint64) with their stratum codes (an array or one code)."""
        if len(digests) == 0:
            return
        entries = np.empty(len(digests), dtype=_ENTRY)
        entries["digest"] = digests
        entries["stratum"] = strata
        self._buffered.append(entries)
        self._buffered_size += len(entries)
        self._added += len(entries)
        if self._buffered_size >= self.buffer_entries:
            self._spill_buffer()

    def unique_pairs(
        self, recode: np.ndarray | None = None, dtype: np.dtype | type = np.uint32
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(digests, strata)``: every distinct ``(digest, stratum)`` pair recorded, sorted by digest
        then stratum; stratum codes are passed through ``recode`` (an array: old code → new code) when
        given and stored as ``dtype``. Call once, at the end of the pass.

        Memory: the result (8 bytes + ``dtype`` per pair) and one partition with its sort.
        """
        digests = np.empty(self._added, dtype=np.uint64)
        strata = np.empty(self._added, dtype=dtype)
        size = 0
        for entries in self._partitions():
            codes = entries["stratum"] if recode is None else recode[entries["stratum"]]
            order = np.lexsort((codes, entries["digest"]))
            sorted_digests, sorted_codes = entries["digest"][order], codes[order]
            _, new_pair = _firsts(sorted_digests, sorted_codes)
            kept = int(np.count_nonzero(new_pair))
            digests[size : size + kept] = sorted_digests[new_pair]
            strata[size : size + kept] = sorted_codes[new_pair]
            size += kept
        if size < self._added:  # duplicates: give the unused tail back (in place, no copy)
            digests.resize(size, refcheck=False)
            strata.resize(size, refcheck=False)
        return digests, strata

    def _partitions(self) -> Iterator[np.ndarray]:
        """Everything recorded, in digest-disjoint parts in digest order: the buffer when nothing was
        spilled, else each spilled partition."""
        if not self._spill.used:
            entries = self._take_buffer()
            if len(entries):
                yield entries
            return
        self._spill_buffer()
        for part in range(_PARTITIONS):
            entries = self._spill.read(part)
            if entries is not None:
                yield entries

    def _take_buffer(self) -> np.ndarray:
        entries = np.concatenate(self._buffered) if self._buffered else np.empty(0, dtype=_ENTRY)
        self._buffered, self._buffered_size = [], 0
        return entries

    def _spill_buffer(self) -> None:
        entries = self._take_buffer()
        partition = (entries["digest"] >> np.uint64(64 - _PARTITION_BITS)).astype(np.intp)
        order = np.argsort(partition, kind="stable")
        bounds = np.searchsorted(partition[order], np.arange(_PARTITIONS + 1))
        for part in np.flatnonzero(np.diff(bounds)):
            self._spill.append(int(part), entries[order[bounds[part] : bounds[part + 1]]])


class DigestUnion:
    """Distinct digests over the pairs of several passes, overall and per stratum name; use as a
    context manager (the spill directory is removed on exit).

    Each pass's pairs are referenced, not copied, while the passes held come to at most
    ``buffer_entries`` pairs (a single pass is always held, whatever its size); a pass that would
    exceed it first sends the held ones to a temporary directory in the 256 top-byte partitions
    (12 bytes a pair; no sort: a pass's pairs are already in digest order). Counting then takes one
    partition at a time. Memory beyond what the caller itself keeps: at most ``max(buffer_entries,
    the largest pass)`` pairs held, plus one partition of all passes (about 1/256 of the pairs) with
    its sort's temporaries.
    """

    def __init__(self, buffer_entries: int = 1 << 22) -> None:
        self.buffer_entries = buffer_entries
        self._codes: dict[str, int] = {}
        self._held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # digests, codes, code → union code
        self._held_size = 0
        self._spill = _Spill("ragspine-union-")

    def __enter__(self) -> DigestUnion:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._spill.close()

    def add(self, strata: Sequence[str], digests: np.ndarray, codes: np.ndarray) -> None:
        """One pass's pairs: ``digests`` (uint64, sorted, each ``(digest, stratum)`` once) with their
        stratum codes, indices into ``strata`` (names). ValueError when they are not so: counting them
        would be silently wrong."""
        digests, codes = np.asarray(digests), np.asarray(codes)
        if (
            digests.dtype != np.uint64
            or digests.ndim != 1
            or codes.shape != digests.shape
            or codes.dtype.kind != "u"
        ):
            raise ValueError("digests must be a uint64 vector with one unsigned stratum code each")
        if len(digests) and (np.any(digests[1:] < digests[:-1]) or int(codes.max()) >= len(strata)):
            raise ValueError("digests must be sorted and their stratum codes must name a stratum")
        mapping = np.array([self._codes.setdefault(name, len(self._codes)) for name in strata], np.uint32)
        if self._held and self._held_size + len(digests) > self.buffer_entries:
            self._spill_held()
        self._held.append((digests, codes, mapping))
        self._held_size += len(digests)

    def counts(self) -> tuple[int, dict[str, int]]:
        """``(distinct digests over every pass, {stratum: distinct digests in it})``, sorted by stratum."""
        per_stratum = np.zeros(len(self._codes), dtype=np.int64)
        held = [(digests, codes, mapping, _bounds(digests)) for digests, codes, mapping in self._held]
        distinct = 0
        for part in range(_PARTITIONS):
            pieces = []
            spilled = self._spill.read(part)
            if spilled is not None:
                pieces.append((spilled["digest"], spilled["stratum"]))
            for digests, codes, mapping, bounds in held:
                low, high = bounds[part], bounds[part + 1]
                if high > low:
                    pieces.append((digests[low:high], mapping[codes[low:high]]))
            if not pieces:
                continue
            if len(pieces) == 1 and spilled is None:  # one pass's run: already sorted, pairs unique
                digests, strata = pieces[0]
            else:
                digests = np.concatenate([digests for digests, _ in pieces])
                strata = np.concatenate([strata for _, strata in pieces])
                order = np.lexsort((strata, digests))
                digests, strata = digests[order], strata[order]
            new_digest, new_pair = _firsts(digests, strata)
            distinct += int(np.count_nonzero(new_digest))
            per_stratum += np.bincount(strata[new_pair], minlength=len(per_stratum))
        return distinct, {name: int(per_stratum[code]) for name, code in sorted(self._codes.items())}

    def _spill_held(self) -> None:
        for digests, codes, mapping in self._held:
            bounds = _bounds(digests)
            for part in np.flatnonzero(np.diff(bounds)).tolist():
                low, high = bounds[part], bounds[part + 1]
                entries = np.empty(high - low, dtype=_ENTRY)
                entries["digest"] = digests[low:high]
                entries["stratum"] = mapping[codes[low:high]]
                self._spill.append(part, entries)
        self._held, self._held_size = [], 0


def _bounds(digests: np.ndarray) -> np.ndarray:
    """Where each top-byte partition of sorted ``digests`` starts, and the end: 257 offsets."""
    return np.concatenate(([0], np.searchsorted(digests, _STARTS), [len(digests)]))


def _firsts(digests: np.ndarray, strata: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For pairs sorted by digest then stratum: which start a new digest, which a new pair."""
    new_digest = np.empty(len(digests), dtype=bool)
    new_digest[:1] = True
    np.not_equal(digests[1:], digests[:-1], out=new_digest[1:])
    new_pair = new_digest.copy()
    new_pair[1:] |= strata[1:] != strata[:-1]
    return new_digest, new_pair
