"""Exact distinct counts of request ids over a day, overall and per stratum, in bounded memory.

Each occurrence is recorded as a 64-bit digest of its request id and a stratum code (12 bytes). Up to
``buffer_entries`` occurrences are held in memory; beyond that they are spilled to a temporary
directory in 256 partitions by the digest's top byte, so that counting at the end loads one partition
at a time (a 256th of the day). Memory is therefore bounded whatever the day's volume; disk takes 12
bytes per trace until the count is taken.

Two distinct ids share a 64-bit digest with probability about d²/2⁶⁵ for d ids (3·10⁻⁶ at ten million),
which would count one duplicate too many; the sample itself is keyed by the full id.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

__all__ = ["DistinctIds"]

_ENTRY = np.dtype([("digest", "<u8"), ("stratum", "<u4")])
_PARTITION_BITS = 8


class DistinctIds:
    """Counts distinct digests, and distinct digests per stratum code; use as a context manager (the
    spill directory is removed on exit)."""

    def __init__(self, buffer_entries: int = 1 << 19) -> None:
        self.buffer_entries = buffer_entries
        self._buffered: list[np.ndarray] = []
        self._buffered_size = 0
        self._spill: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> DistinctIds:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._spill is not None:
            self._spill.cleanup()
            self._spill = None

    def add(self, digests: np.ndarray, strata: np.ndarray | int = 0) -> None:
        """Record occurrences: ``digests`` (uint64) with their stratum codes (an array or one code)."""
        if len(digests) == 0:
            return
        entries = np.empty(len(digests), dtype=_ENTRY)
        entries["digest"] = digests
        entries["stratum"] = strata
        self._buffered.append(entries)
        self._buffered_size += len(entries)
        if self._buffered_size >= self.buffer_entries:
            self._spill_buffer()

    def counts(self, strata: int = 1) -> tuple[int, np.ndarray]:
        """``(distinct digests, distinct digests per stratum code 0..strata-1)``."""
        per_stratum = np.zeros(strata, dtype=np.int64)
        if self._spill is None:
            return _count(self._take_buffer(), per_stratum), per_stratum
        self._spill_buffer()
        distinct = 0
        for path in sorted(Path(self._spill.name).iterdir()):
            distinct += _count(np.fromfile(path, dtype=_ENTRY), per_stratum)
        return distinct, per_stratum

    def _take_buffer(self) -> np.ndarray:
        entries = np.concatenate(self._buffered) if self._buffered else np.empty(0, dtype=_ENTRY)
        self._buffered, self._buffered_size = [], 0
        return entries

    def _spill_buffer(self) -> None:
        entries = self._take_buffer()
        if self._spill is None:
            self._spill = tempfile.TemporaryDirectory(prefix="ragspine-distinct-")
        partition = (entries["digest"] >> np.uint64(64 - _PARTITION_BITS)).astype(np.intp)
        order = np.argsort(partition, kind="stable")
        bounds = np.searchsorted(partition[order], np.arange((1 << _PARTITION_BITS) + 1))
        for part in np.flatnonzero(np.diff(bounds)):
            with open(Path(self._spill.name) / f"{part:03d}.bin", "ab") as fh:
                entries[order[bounds[part] : bounds[part + 1]]].tofile(fh)


def _count(entries: np.ndarray, per_stratum: np.ndarray) -> int:
    """Distinct digests among ``entries``; adds the distinct (digest, stratum) pairs to ``per_stratum``."""
    if len(entries) == 0:
        return 0
    order = np.lexsort((entries["stratum"], entries["digest"]))
    digests, strata = entries["digest"][order], entries["stratum"][order]
    new_digest = np.empty(len(order), dtype=bool)
    new_digest[0] = True
    np.not_equal(digests[1:], digests[:-1], out=new_digest[1:])
    new_pair = new_digest.copy()
    new_pair[1:] |= strata[1:] != strata[:-1]
    per_stratum += np.bincount(strata[new_pair], minlength=len(per_stratum))[: len(per_stratum)]
    return int(np.count_nonzero(new_digest))
