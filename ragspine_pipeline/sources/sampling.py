"""The daily production sample: one streaming pass over a day of traces, memory bounded by the sample.

Every line is read once. A line that is not a JSON object, fails the trace contract
(``contracts.trace``) or has no request id is quarantined with its source and line number and counted,
never dropped silently.
Valid traces are de-duplicated by request id and the ``n`` with the smallest
``blake2b(f"{seed}:{request_id}")`` are kept. The result depends only on the lines and the seed, not on
how the store lists or splits them: among duplicates the one with the smallest content hash is kept, and
the sample is sorted by request id.

Lines are read a block at a time: ``sample_blocks.BlockReader`` parses a block as columns and vouches
for the traces it can check against the contract that way; every other line goes through the record
reader (``trace_lines.parse_line``: ``json.loads`` and the pydantic ``Trace``), which alone decides
what is quarantined and why. A trace is compared and hashed only when its priority could put it in the
sample, and parsed into a record only when it is in the sample.

Stratified (``stratify="topic"``), each value of the trace's ``tags["topic"]`` is a stratum (no tag:
``"(none)"``). The pass keeps, per stratum, the ``max(n, floor)`` smallest priorities and counts the
stratum's distinct request ids; at the end ``strata.allocate`` splits ``n`` over the strata and each
stratum contributes its smallest priorities. A request id whose lines name different strata (a logging
fault) counts in each stratum's population, and is sampled only in the stratum whose kept lines hold its
smallest content hash (the others take their next priority instead); ``conflicts`` counts such ids.

A day too large for one process is read in shards by several workers and merged (``shards.py``);
:func:`sample_day` is the same code with one shard, so both give the same sample.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragspine_pipeline.sources.priorities import priority
from ragspine_pipeline.sources.shards import DaySample, Redactor, merge_shards, sample_shard
from ragspine_pipeline.sources.strata import DEFAULT_FLOOR
from ragspine_pipeline.sources.trace_lines import (
    QUARANTINE_MAX_BYTES,
    QUARANTINE_REASONS,
    check_quarantine_path,
)
from ragspine_pipeline.sources.trace_store import TraceStore

__all__ = [
    "QUARANTINE_MAX_BYTES",
    "QUARANTINE_REASONS",
    "DaySample",
    "Redactor",
    "priority",
    "sample_day",
]


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
    raw_base64, raw_bytes}`` (see ``trace_lines.quarantine_entry``). The file is replaced when the pass
    completes (removed when no line was bad) and left as it was when the pass fails. Entries are kept
    in line order up to ``quarantine_max_bytes``; the first that does not fit and every bad line after
    it are only counted (``quarantine_kept`` and ``quarantine_omitted`` in ``counts``; the counts per
    reason stay exact). With ``quarantine`` None they are only counted. ``stratify`` names a tag
    dimension to stratify on, with ``floor`` traces owed to each stratum (see ``strata.allocate``).
    ``redact``, when given, is applied to every sampled record (and only to those) before it is
    returned; ``redact_text`` to the raw text of every quarantined line before it is written.

    Exactly ``shards.merge_shards`` of one ``shards.sample_shard`` over all the day's objects. Memory:
    one block of lines (``trace_store.BLOCK_SIZE``), the candidates (``n``; stratified ``max(n, floor)``
    per stratum) and, at the end of the pass, the distinct ``(request id, stratum)`` digests: 9 bytes
    per trace below 256 strata, at most 12 (during the pass they spill to a temporary directory).
    """
    path = None if quarantine is None else Path(quarantine)
    check_quarantine_path(path)  # before the pass, not after it
    shard = sample_shard(
        store,
        day,
        store.objects(day),
        n=n,
        seed=seed,
        stratify=stratify,
        floor=floor,
        redact_text=redact_text,
        # Without a file, nothing is kept: the shard builds no entries at all.
        quarantine_max_bytes=quarantine_max_bytes if path is not None else 0,
    )
    return merge_shards(
        day,
        [shard],
        n=n,
        seed=seed,
        stratify=stratify,
        floor=floor,
        redact=redact,
        quarantine=path,
        quarantine_max_bytes=quarantine_max_bytes,
    )
