"""Sampling one day in shards: several workers each read a contiguous part of the day's objects, and one
merge gives exactly the sample that a single pass over the whole day gives.

    groups = plan_shards(store, day, 4)                                   # where the run is planned
    results = [sample_shard(store, day, group, n=n, seed=s) for group in groups]  # one per worker
    sample = merge_shards(day, results, n=n, seed=s, quarantine=path)     # one step, after them all

``sampling.sample_day`` is this with one shard holding every object: there is one code path. A shard
result is plain data (builtins, bytes and numpy arrays; see :func:`sample_shard`), so it can cross
hosts through any pickling IO manager and be loaded by a process that has only numpy.

Why the merge is exact, for any split of the objects into shards:

* **The sample.** A shard keeps, per stratum, the ``max(n, floor)`` (stratified) or ``n`` smallest
  priorities with each id's smallest-content line; merging those keeps what one pass would (the
  argument is in ``priorities.Smallest``), and the stratified choice runs on the merged candidates.
* **Counts.** ``read``, ``valid`` and the quarantine reasons add up. ``duplicates`` is ``valid`` minus
  the distinct request ids over the union of the shards (an id in two shards is one id), and the
  stratum populations are distinct ids per stratum over the union: each shard hands on its distinct
  ``(digest, stratum)`` pairs, counted together by ``distinct.DigestUnion``.
* **Quarantine.** The merged file is the shards' entries concatenated in shard order under the same
  byte cap; the cap composes because the first entry that does not fit closes it
  (``trace_lines.QuarantineCap``). Shards must therefore be passed in their objects' listing order.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragspine_pipeline.sources.distinct import DigestUnion
from ragspine_pipeline.sources.priorities import Smallest, choose_stratified
from ragspine_pipeline.sources.sample_blocks import BlockReader, BlockTraces
from ragspine_pipeline.sources.shard_pass import ShardPass
from ragspine_pipeline.sources.strata import DEFAULT_FLOOR, NO_STRATUM, allocate
from ragspine_pipeline.sources.trace_lines import (
    QUARANTINE_MAX_BYTES,
    QUARANTINE_REASONS,
    Bad,
    QuarantineCap,
    QuarantineFile,
    parse_line,
    quarantine_entry,
    reject_constant,
)
from ragspine_pipeline.sources.trace_store import RawBlock, TraceStore, read_ahead

__all__ = ["DaySample", "Redactor", "merge_shards", "plan_shards", "sample_shard"]

SHARD_FORMAT = "ragspine-shard/1"

# A redaction hook: a sampled record in, ``(redacted record, findings per kind)`` out.
Redactor = Callable[[dict], tuple[dict, Counter]]


@dataclass(frozen=True)
class DaySample:
    """The sampled records (raw JSON objects as read, sorted by request id) and what the pass saw.

    ``counts``: ``read`` non-blank lines, ``valid`` lines that passed the contract (duplicates included),
    ``duplicates`` valid lines whose request id came earlier, ``quarantined`` per reason (every reason
    present, 0 when none), ``sampled``, and ``quarantine_kept`` / ``quarantine_omitted`` (entries
    written to the quarantine file, and bad lines only counted because the cap was reached; both 0
    without a quarantine file); with a redaction hook also ``redacted`` (findings per kind, sorted).
    ``quarantine_path`` is the file bad lines were written to, None when there were none.

    ``allocation`` (stratified samples only): ``dimension``, ``floor``, ``seed``, ``n``, ``exceeded_n``
    (the floors alone exceeded ``n``), ``conflicts`` (request ids seen in several strata) and ``strata``:
    ``{stratum: {"population", "allocated", "sampled"}}`` sorted by stratum.
    """

    day: str
    records: list[dict]
    counts: dict[str, Any]
    quarantine_path: Path | None
    allocation: dict[str, Any] | None = None


def plan_shards(store: TraceStore, day: str, shards: int) -> list[list[str]]:
    """The day's objects (``store.objects(day)``, in listing order) in contiguous groups, one per shard.

    There are ``min(shards, objects)`` groups, none empty: fewer objects than shards give one object
    per group, and a day without objects gives ``[]``. Groups are balanced by bytes as stored when the
    store tells sizes from its listing (``object_sizes``: no object is opened), else by count: the
    largest group is as small as any contiguous split into that many groups can make it (the slowest
    shard sets the wall time), and groups are filled in listing order up to that size, leaving at least
    one object for each later group. Bytes as stored: a gzipped object counts its compressed size, so a
    day mixing gzipped and plain objects is balanced by bytes read, not by traces. ValueError when
    ``shards`` < 1.
    """
    if shards < 1:
        raise ValueError(f"the number of shards must be >= 1, got {shards}")
    sizes: Callable[[str], dict[str, int]] | None = getattr(store, "object_sizes", None)
    if sizes is not None:
        by_name = sizes(day)
        names, weights = list(by_name), list(by_name.values())
    else:
        names = store.objects(day)
        weights = [1] * len(names)
    groups = min(shards, len(names))
    if groups == 0:
        return []
    limit = _smallest_limit(weights, groups)
    cuts, start = [], 0
    for group in range(groups):
        later = groups - group - 1  # groups after this one, each owed an object
        end, size = start + 1, weights[start]
        while end < len(names) - later and size + weights[end] <= limit:
            size += weights[end]
            end += 1
        if later == 0:
            end = len(names)  # within the limit: the greedy cuts are never behind an optimal split
        cuts.append(names[start:end])
        start = end
    return cuts


def _smallest_limit(weights: list[int], groups: int) -> int:
    """The smallest largest-group weight of a split of ``weights`` into at most ``groups`` contiguous
    groups (binary search over the limit; greedy packing needs the fewest groups for a given limit)."""

    def needed(limit: int) -> int:
        count, size = 1, 0
        for weight in weights:
            if size + weight > limit:
                count, size = count + 1, weight
            else:
                size += weight
        return count

    low, high = max(weights), sum(weights)
    while low < high:
        middle = (low + high) // 2
        if needed(middle) <= groups:
            high = middle
        else:
            low = middle + 1
    return low


def sample_shard(
    store: TraceStore,
    day: str,
    objects: Sequence[str],
    *,
    n: int,
    seed: int,
    stratify: str | None = None,
    floor: int = DEFAULT_FLOOR,
    redact_text: Callable[[str], str] | None = None,
    quarantine_max_bytes: int = QUARANTINE_MAX_BYTES,
) -> dict[str, Any]:
    """One streaming pass over ``objects`` (names of the day's objects, read in the order given): what
    :func:`merge_shards` needs of them, as plain data (builtins, bytes, numpy arrays only):

    * ``format`` (``"ragspine-shard/1"``), ``day``, ``objects``, ``seed``, ``stratify``, ``capacity``
      (candidates kept per stratum: ``n``, stratified ``max(n, floor)``), ``quarantine_max_bytes``;
    * ``counts``: ``{"read", "valid", "quarantined": {reason: lines}}``;
    * ``strata``: the stratum names seen (``"(none)"`` alone when not stratifying), sorted;
    * ``candidates``: ``{stratum: [(priority, request_id, content_hash, record), ...]}``, smallest
      priority first, at most ``capacity`` per stratum; ``record`` is the trace's JSON text (UTF-8);
    * ``digests`` (uint64) and ``digest_strata`` (the smallest unsigned dtype, indices into
      ``strata``): every distinct ``(request id digest, stratum)`` pair, sorted by digest;
    * ``quarantine``: the entries kept (ASCII JSON lines, in line order, at most
      ``quarantine_max_bytes`` with their newlines; ``redact_text`` applied to each bad line's text) and
      ``quarantine_omitted`` (bad lines after the cap closed).

    Its size: the candidates plus at most 12 bytes per valid trace (9 with fewer than 256 strata).
    Memory: a few blocks of lines (read ahead), the candidates, the quarantine entries and, at the end,
    the digests; during the pass the digests spill to a temporary directory beyond half a million
    traces.
    """
    capacity = _capacity(n, floor, stratify)
    shard = ShardPass(stratify, capacity, seed)
    reader = BlockReader(stratify)
    quarantined = dict.fromkeys(QUARANTINE_REASONS, 0)
    cap, entries = QuarantineCap(quarantine_max_bytes), []
    read = valid = 0
    with shard:
        for traces in read_ahead(_read_blocks(reader, read_ahead(store.iter_blocks(day, objects)))):
            shard.offer_columns(traces)
            read += len(traces.lines) + len(traces.leftovers)
            valid += len(traces.lines)
            for line in traces.leftovers:  # the record reader's verdict, line by line
                outcome = parse_line(line)
                if isinstance(outcome, Bad):
                    quarantined[outcome.reason] += 1
                    if cap.closed:  # only counted from here on: no entry to build
                        cap.skip(1)
                    elif cap.admit(len(entry := quarantine_entry(line, outcome, redact_text))):
                        entries.append(entry)
                    continue
                valid += 1
                shard.offer_record(*outcome)
            shard.end_block()
        plain = shard.plain()
    return {
        "format": SHARD_FORMAT,
        "day": day,
        "objects": list(objects),
        "seed": seed,
        "stratify": stratify,
        "capacity": capacity,
        "quarantine_max_bytes": quarantine_max_bytes,
        "counts": {"read": read, "valid": valid, "quarantined": quarantined},
        **plain,
        "quarantine": entries,
        "quarantine_omitted": cap.omitted,
    }


def _read_blocks(reader: BlockReader, blocks: Iterator[RawBlock]) -> Iterator[BlockTraces]:
    """Each block as ``reader`` reads it; run behind :func:`read_ahead`, a block is read (DuckDB, outside
    the GIL for the most part) while the one before it is offered to the sample. Closing it closes
    ``blocks``."""
    with closing(blocks):
        for block in blocks:
            yield reader.read(block)


def merge_shards(
    day: str,
    shard_results: Iterable[dict[str, Any]],
    *,
    n: int,
    seed: int,
    stratify: str | None = None,
    floor: int = DEFAULT_FLOOR,
    redact: Redactor | None = None,
    quarantine: Path | None = None,
    quarantine_max_bytes: int = QUARANTINE_MAX_BYTES,
) -> DaySample:
    """The day's sample from the results of :func:`sample_shard` over its objects: exactly the
    :class:`DaySample` of one pass over all of them (see the module docstring).

    ``shard_results`` must cover the day's objects once each, in listing order (shard order decides the
    quarantine's order), sampled with the same ``seed``, ``stratify`` and at least this capacity, and
    with a ``quarantine_max_bytes`` at least this one for a shard that reached its cap; ValueError
    otherwise, or when an object is in two shards. The results are consumed once, in order, so they can
    be loaded one at a time. Bad lines go to ``quarantine`` as in ``sampling.sample_day``; ``redact``
    is applied to every sampled record (and only to those).

    Memory, beyond what the caller holds: the candidates (at most ``capacity`` per stratum, merged as
    each shard arrives) and the distinct counts (``distinct.DigestUnion``): the digest pairs of the
    shards received are kept (9 bytes a pair below 256 strata, at most 12) while they come to at most 4M
    pairs or are the latest shard alone; earlier ones are then spilled to a temporary directory (12
    bytes a pair on disk), and counting takes one top-byte partition (1/256 of all pairs) at a time. A
    caller that loads the results one at a time (a generator) thus holds about two shards' digests at
    the peak: the latest one received and the one being loaded.
    """
    capacity = _capacity(n, floor, stratify)
    path = None if quarantine is None else Path(quarantine)
    kept: dict[str, Smallest] = {}
    quarantined = dict.fromkeys(QUARANTINE_REASONS, 0)
    read = valid = 0
    seen: set[str] = set()
    with QuarantineFile(path, quarantine_max_bytes) as bad_lines, DigestUnion() as union:
        for shard in shard_results:
            _check_shard(
                shard, day, seed, stratify, capacity, seen, None if path is None else quarantine_max_bytes
            )
            read += shard["counts"]["read"]
            valid += shard["counts"]["valid"]
            for reason, lines in shard["counts"]["quarantined"].items():
                quarantined[reason] += lines
            for stratum, candidates in shard["candidates"].items():
                smallest = kept.setdefault(stratum, Smallest(capacity))
                for prio, request_id, content, record in candidates:
                    smallest.offer(request_id, prio, content, record)
            bad_lines.extend(shard["quarantine"], shard["quarantine_omitted"])
            union.add(shard["strata"], shard["digests"], shard["digest_strata"])
        distinct_ids, populations = union.counts()
    allocation = None
    if stratify is None:
        chosen = [] if NO_STRATUM not in kept else kept[NO_STRATUM].records_by_id()
    else:
        allocated, exceeded = allocate(populations, n, floor)
        ranked = {stratum: kept[stratum].candidates() if stratum in kept else [] for stratum in populations}
        by_id, sampled = choose_stratified(ranked, allocated)
        chosen = [by_id[request_id] for request_id in sorted(by_id)]
        allocation = {
            "dimension": stratify,
            "floor": floor,
            "seed": seed,
            "n": n,
            "exceeded_n": exceeded,
            "conflicts": sum(populations.values()) - distinct_ids,
            "strata": {
                stratum: {"population": size, "allocated": allocated[stratum], "sampled": sampled[stratum]}
                for stratum, size in populations.items()
            },
        }
    records = [json.loads(record, parse_constant=reject_constant) for record in chosen]
    counts: dict[str, Any] = {
        "read": read,
        "valid": valid,
        "duplicates": valid - distinct_ids,
        "quarantined": quarantined,
        "sampled": len(records),
        "quarantine_kept": bad_lines.cap.kept,
        "quarantine_omitted": bad_lines.cap.omitted,
    }
    if redact is not None:
        records, counts["redacted"] = _redact_all(records, redact)
    return DaySample(day, records, counts, path if bad_lines.cap.kept else None, allocation)


def _redact_all(records: list[dict], redact: Redactor) -> tuple[list[dict], dict[str, int]]:
    """The records through ``redact``, and the findings per kind summed over them (sorted by kind)."""
    found: Counter = Counter()
    redacted = []
    for record in records:
        clean, kinds = redact(record)
        redacted.append(clean)
        found.update(kinds)
    return redacted, dict(sorted(found.items()))


def _capacity(n: int, floor: int, stratify: str | None) -> int:
    if n < 0:
        raise ValueError(f"the sample size must be >= 0, got {n}")
    if floor < 0:
        raise ValueError(f"the floor must be >= 0, got {floor}")
    return n if stratify is None else max(n, floor)


def _check_shard(
    shard: dict[str, Any],
    day: str,
    seed: int,
    stratify: str | None,
    capacity: int,
    seen: set[str],
    max_bytes: int | None,
) -> None:
    """ValueError when merging ``shard`` could give another sample than one pass would."""
    if shard.get("format") != SHARD_FORMAT:
        raise ValueError(f"not a shard result of this version ({SHARD_FORMAT}): {shard.get('format')!r}")
    if (shard["day"], shard["seed"], shard["stratify"]) != (day, seed, stratify):
        raise ValueError(
            f"a shard of day {shard['day']}, seed {shard['seed']}, stratify {shard['stratify']!r} cannot "
            f"be merged into day {day}, seed {seed}, stratify {stratify!r}"
        )
    if shard["capacity"] < capacity:
        raise ValueError(
            f"a shard kept {shard['capacity']} candidates per stratum; this sample needs {capacity}"
        )
    if max_bytes is not None and shard["quarantine_omitted"] and shard["quarantine_max_bytes"] < max_bytes:
        raise ValueError(
            f"a shard capped its quarantine at {shard['quarantine_max_bytes']} bytes; this merge keeps "
            f"up to {max_bytes}"
        )
    twice = seen.intersection(shard["objects"])
    if twice:
        raise ValueError(f"objects in two shards (their lines would count twice): {sorted(twice)}")
    seen.update(shard["objects"])
