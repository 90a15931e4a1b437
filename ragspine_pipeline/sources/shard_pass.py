"""What one pass over some of a day's objects keeps: a bounded set of candidates per stratum, and the
distinct ``(request id, stratum)`` pairs it saw — the two halves of a shard result (``shards.py``).

A trace is compared and hashed only when its priority could put it among its stratum's candidates:
the bound test runs over a block's 64-bit priority prefixes at once, so a day of millions of traces
hashes a few thousand lines. Candidates stay the trace's JSON text; only the merge parses the few it
samples.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyarrow as pa

from ragspine_pipeline.sources.distinct import DistinctIds
from ragspine_pipeline.sources.priorities import Smallest, digests, prefix, priority
from ragspine_pipeline.sources.sample_blocks import BlockTraces
from ragspine_pipeline.sources.strata import NO_STRATUM

__all__ = ["ShardPass"]


class ShardPass:
    """A ``priorities.Smallest`` of ``capacity`` per stratum (one, ``NO_STRATUM``, when not
    stratifying) and the ``(request id, stratum)`` occurrences offered (``distinct.DistinctIds``, which
    spills beyond half a million); use as a context manager (the spill directory is removed on exit)."""

    def __init__(self, dimension: str | None, capacity: int, seed: int) -> None:
        self.dimension = dimension
        self.capacity = capacity
        self.seed = seed
        self._codes: dict[str, int] = {}
        self._by_code: list[Smallest] = []
        self._distinct = DistinctIds()
        self._pending: list[tuple[bytes, int]] = []  # record-reader traces of this block

    def __enter__(self) -> ShardPass:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._distinct.__exit__(*exc_info)

    def _stratum(self, value: str | None) -> int:
        stratum = NO_STRATUM if value is None else value
        code = self._codes.get(stratum)
        if code is None:
            code = self._codes[stratum] = len(self._codes)
            self._by_code.append(Smallest(self.capacity))
        return code

    def offer_columns(self, traces: BlockTraces) -> None:
        """Offer the traces the columnar reader vouched for. A trace is compared and hashed only when its
        priority is within its stratum's bound (a few thousand per day): the bound test runs over the
        block's 64-bit priority prefixes at once."""
        prios = [priority(self.seed, request_id) for request_id in traces.request_ids]
        if not prios:
            return
        prefixes = digests(prios)
        codes = self._codes_of(traces.strata, len(prios))
        bounds = np.array([prefix(kept.bound()) for kept in self._by_code], dtype=np.uint64)
        for i in np.flatnonzero(prefixes <= bounds[codes]).tolist():
            line = bytes(traces.lines[i])
            content = hashlib.blake2b(line, digest_size=16).digest()
            self._by_code[codes[i]].offer(traces.request_ids[i], prios[i], content, line)
        self._distinct.add(prefixes, codes)

    def _codes_of(self, strata: pa.Array | None, n: int) -> np.ndarray:
        """The stratum code of each trace (one dictionary lookup per distinct tag value of the block)."""
        if self.dimension is None or strata is None:
            return np.full(n, self._stratum(None), dtype=np.uint32)
        encoded = strata.dictionary_encode()
        values = [*encoded.dictionary.to_pylist(), None]  # the last code: no tag
        indices = encoded.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
        local = np.zeros(len(values), dtype=np.uint32)
        for index in np.unique(indices).tolist():  # only the values present: a stratum is never empty
            local[index] = self._stratum(values[index])
        return local[indices]

    def offer_record(
        self, request_id: str, content: bytes, record: bytes, tags: dict[str, str] | None
    ) -> None:
        """Offer a trace the record reader validated."""
        value = None if self.dimension is None or tags is None else tags.get(self.dimension)
        code = self._stratum(value)
        prio = priority(self.seed, request_id)
        self._by_code[code].offer(request_id, prio, content, record)
        self._pending.append((prio, code))

    def end_block(self) -> None:
        if self._pending:
            prios, codes = zip(*self._pending, strict=True)
            self._distinct.add(digests(list(prios)), np.array(codes, dtype=np.uint32))
            self._pending = []

    def plain(self) -> dict[str, Any]:
        """``strata``, ``candidates``, ``digests`` and ``digest_strata`` of the shard result."""
        strata = sorted(self._codes)
        recode = np.zeros(len(strata), dtype=np.uint32)
        for new, stratum in enumerate(strata):
            recode[self._codes[stratum]] = new
        dtype = np.min_scalar_type(max(len(strata) - 1, 0))
        pairs, pair_strata = self._distinct.unique_pairs(recode, dtype)
        candidates = {stratum: self._by_code[self._codes[stratum]].candidates() for stratum in strata}
        return {"strata": strata, "candidates": candidates, "digests": pairs, "digest_strata": pair_strata}
