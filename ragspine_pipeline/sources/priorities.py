"""Which traces a sample keeps: the distinct request ids of smallest priority, and among the lines of
one id the one with the smallest content hash.

``priority(seed, request_id)`` is a keyed hash, so the choice is uniform over the ids and reproducible
from the seed; the content hash makes it independent of the order of lines and files. A candidate is
the plain tuple ``(priority, request_id, content_hash, record)`` — ``record`` the trace's JSON text as
UTF-8 bytes — so that a shard can hand its candidates to another process as they are.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Candidate", "Smallest", "choose_stratified", "digests", "prefix", "priority"]

# (priority, request id, content hash, the trace's JSON text as UTF-8 bytes)
Candidate = tuple[bytes, str, bytes, bytes]


def priority(seed: int, request_id: str) -> bytes:
    """The sampling priority of a request id: the sample keeps the smallest (compared as bytes)."""
    return hashlib.blake2b(f"{seed}:{request_id}".encode("utf-8", "surrogatepass"), digest_size=16).digest()


def digests(prios: list[bytes]) -> np.ndarray:
    """The 64-bit digest of each request id for the distinct counts: the first 8 bytes of its priority."""
    return np.frombuffer(b"".join(prios), dtype=">u8")[::2].astype(np.uint64)


def prefix(bound: bytes | None) -> int:
    """A bound as a 64-bit prefix: every priority ``<=`` the bound has a prefix ``<=`` this."""
    if bound is None:
        return (1 << 64) - 1
    return int.from_bytes(bound[:8].ljust(8, b"\0"), "big")


@dataclass(eq=False)
class _Kept:
    key: tuple[bytes, str]  # (priority, request id): a total order even if two priorities collide
    content: bytes
    record: bytes

    def __lt__(self, other: _Kept) -> bool:
        return self.key > other.key  # heapq is a min-heap; the root must be the worst kept record


class Smallest:
    """The ``n`` distinct request ids of smallest key offered so far, each with its smallest-content
    record.

    Exact in O(n) memory: an id that is not kept when first offered, or is evicted later, can never
    return, because the worst kept key only decreases; so every offer of a finally kept id was compared.

    Mergeable: offering the :meth:`candidates` of several instances (each fed a part of the lines) to a
    fresh one keeps exactly what one instance fed every line would keep. An id among the ``n`` smallest
    of all the lines is among the ``n`` smallest of every part holding it (a part's ids are a subset),
    so each part's candidate for it carries that part's smallest content, and the merge takes the
    smallest of those.
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

    def offer(self, request_id: str, prio: bytes, content: bytes, record: bytes) -> None:
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

    def candidates(self) -> list[Candidate]:
        """What is kept, smallest key first."""
        ordered = sorted(self._heap, key=lambda kept: kept.key)
        return [(kept.key[0], kept.key[1], kept.content, kept.record) for kept in ordered]

    def records_by_id(self) -> list[bytes]:
        """The kept records, sorted by request id."""
        return [self._by_id[request_id].record for request_id in sorted(self._by_id)]


def choose_stratified(
    ranked: Mapping[str, Sequence[Candidate]], allocated: Mapping[str, int]
) -> tuple[dict[str, bytes], dict[str, int]]:
    """``({request_id: record}, {stratum: sampled})``: each stratum's ``allocated`` smallest candidates
    (``ranked``: smallest first) among the request ids it owns.

    A request id kept in several strata (its lines name different strata: a logging fault) belongs to
    the one whose candidate holds its smallest content hash (ties: the stratum name); the others skip it
    and take their next priority, so a conflict does not shrink the sample.
    """
    owner: dict[str, tuple[bytes, str]] = {}
    for stratum, entries in ranked.items():
        for _, request_id, content, _ in entries:
            owner[request_id] = min(owner.get(request_id, (content, stratum)), (content, stratum))
    chosen: dict[str, bytes] = {}
    sampled: dict[str, int] = {}
    for stratum, entries in ranked.items():
        mine = [entry for entry in entries if owner[entry[1]][1] == stratum][: allocated[stratum]]
        chosen.update((request_id, record) for _, request_id, _, record in mine)
        sampled[stratum] = len(mine)
    return chosen, sampled
