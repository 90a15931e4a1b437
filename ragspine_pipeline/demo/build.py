"""The embedded demo environment: everything the pipeline reads, generated under one directory.

:func:`init_demo` writes, idempotently (a file whose content would not change is not touched, and the
summary says whether anything changed)::

    root/corpus.jsonl                      the knowledge base (demo.corpus, demo.finance), one chunk a line
    root/evidence.jsonl                    the evidence registry derived from it
    root/gates.yaml                        the demo's release gates (a copy of the packaged gates.yaml)
    root/golden/gold.jsonl(.lock)          the golden set, frozen as DEMO_GOLDEN_VERSION
    root/index/manifest.json               the live index of the reference engine (what the sensor watches)
    root/traces/dt=YYYY-MM-DD/part-00000.jsonl[.gz]   seven days of production traces
    root/extraction/{truth.json, facts.jsonl, baseline.json}   a workbook, as the live index's parser
                                           extracted it (demo.workbook)

Production traces are the healthy engine answering the demo's production question pool, with the
texture of real traffic: volume, workflow mix, the share of questions the knowledge base cannot answer
(6–9 %) and latency vary by day, one day carries malformed lines and a retried request (for quarantine
and de-duplication), one day is gzipped. Nothing in the service changes from day to day, so the nightly
drop tests have nothing to report on the demo's own week. A day's file depends only on its date, the
seed and ``traces_per_day``, so re-running on a later day rewrites nothing it already wrote.

:func:`rebuild_index` publishes the next index version (``demo-ix-0002`` …), healthy or degraded: the
degraded engine does not enforce the ACL (restricted and superseded chunks leak into retrieval) and
keeps fewer candidates, so the re-evaluation after that rebuild must block the release; with a
degraded document parser the re-extracted workbook loses fills and merged spans, and two extraction
channels fail.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ragspine_pipeline import inputs
from ragspine_pipeline.decision import golden
from ragspine_pipeline.demo.chunks import Chunk
from ragspine_pipeline.demo.corpus import GOLDEN_CASES, PRODUCTION_QUESTIONS, chunk_rows
from ragspine_pipeline.demo.reference_engine import EngineConfig, ReferenceEngine, file_sha256
from ragspine_pipeline.demo.workbook import DEGRADED_PARSER, HEALTHY_PARSER, write_extraction_demo
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import jsonl_line, jsonl_lines, write_if_changed, write_text_atomically
from ragspine_pipeline.jsonvalues import json_type

GOLDEN_VERSION = "demo-2026.11"
GOLDEN_APPROVER = "ragspine demo"
INDEX_PREFIX = "demo-ix-"
FIRST_INDEX_VERSION = f"{INDEX_PREFIX}0001"
DAYS = 7
HISTORY = 100  # previous index versions a manifest keeps

HEALTHY = EngineConfig()
# A rebuild from an unfiltered snapshot with a shrunken candidate pool: restricted and superseded chunks
# compete with current ones for two first-stage slots, and only one chunk reaches the prompt.
DEGRADED = EngineConfig(candidates=2, rerank_keep=2, context_size=1, enforce_acl=False)

REGISTRY_FIELDS = ("chunk_id", "document_id", "parent_id", "version", "permitted", "current", "text")
WORKFLOW_SHARE = {
    "access-requests": 0.22,
    "expenses": 0.21,
    "incident-response": 0.17,
    "oncall": 0.15,
    "release-freeze": 0.15,
    "data-retention": 0.10,
}
CHANNELS, CHANNEL_SHARE = ("slack", "web", "api"), (0.55, 0.30, 0.15)
REGIONS, REGION_SHARE = ("eu", "us"), (0.6, 0.4)
# Traffic by UTC hour: European and American working hours overlap in the afternoon.
HOURLY = np.array([1, 1, 1, 1, 1, 2, 4, 7, 10, 11, 11, 10, 9, 11, 13, 13, 12, 10, 8, 6, 4, 3, 2, 1], float)
UNANSWERABLE_SHARE = (0.06, 0.09)  # the day's share is drawn from this range


@dataclass(frozen=True)
class DemoSummary:
    """What :func:`init_demo` produced; ``changed`` is False when every file already had its content."""

    root: Path
    corpus: Path
    evidence: Path
    gates: Path
    golden: Path
    golden_lock: Path
    manifest: Path
    traces: Path
    n_chunks: int
    n_restricted: int
    n_stale: int
    golden_cases: dict[str, int]  # per workflow
    days: tuple[date, ...]
    traces_per_day: dict[str, int]  # ISO day -> trace lines written (malformed lines included)
    index_version: str
    changed: bool


def init_demo(
    root: Path, *, today: date | None = None, traces_per_day: int = 300, seed: int = 7
) -> DemoSummary:
    """Write the demo under ``root`` (created if needed) for the seven days before ``today`` (UTC).

    Everything that could stop it half-way is checked first (:func:`_check_root`): an unusable root or
    ``today``, or an existing file in the way, is a one-line InputError with nothing written."""
    root = Path(root)
    today = today or datetime.now(UTC).date()
    _check_root(root, today)
    for sub in ("golden", "index", "traces"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    rows = chunk_rows()
    changed = False

    corpus, evidence = root / "corpus.jsonl", root / "evidence.jsonl"
    changed |= write_if_changed(corpus, "".join(jsonl_lines(rows, corpus)), "demo corpus")
    changed |= write_if_changed(
        evidence,
        "".join(jsonl_lines([{k: row[k] for k in REGISTRY_FIELDS} for row in rows], evidence)),
        "registry",
    )
    gates = root / "gates.yaml"
    changed |= write_if_changed(
        gates, resources.files(__package__).joinpath("gates.yaml").read_text("utf-8"), "gates"
    )

    gold = root / "golden" / "gold.jsonl"
    changed |= write_if_changed(gold, "".join(jsonl_lines(GOLDEN_CASES, gold)), "golden set")
    changed |= _freeze_once(gold, frozen_at=_at(today - timedelta(days=DAYS + 1), 3))

    manifest = root / "index" / "manifest.json"
    index_version = _ensure_manifest(root, manifest, today)
    changed |= index_version is None
    live = _read_manifest(manifest) or {}
    index_version = index_version or str(live["index_version"])
    # The workbook as the parser of the live index build extracted it.
    live_parser = live.get("parser", HEALTHY_PARSER)
    write_extraction_demo(root, degraded=live_parser == DEGRADED_PARSER)

    engine = production_engine()
    days = tuple(today - timedelta(days=n) for n in range(DAYS, 0, -1))
    counts = {}
    for day in days:
        lines = production_day_lines(engine, day, traces_per_day, seed)
        counts[day.isoformat()] = len(lines)
        changed |= _write_partition(root / "traces", day, "".join(line + "\n" for line in lines))

    return DemoSummary(
        root=root,
        corpus=corpus,
        evidence=evidence,
        gates=gates,
        golden=gold,
        golden_lock=golden.lock_path(gold),
        manifest=manifest,
        traces=root / "traces",
        n_chunks=len(rows),
        n_restricted=sum(not r["permitted"] for r in rows),
        n_stale=sum(not r["current"] for r in rows),
        golden_cases=dict(Counter(case["tags"]["workflow"] for case in GOLDEN_CASES)),
        days=days,
        traces_per_day=counts,
        index_version=index_version,
        changed=changed,
    )


def rebuild_index(
    root: Path, *, degraded: bool = False, degraded_parser: bool = False, now: datetime | None = None
) -> dict[str, Any]:
    """Publish the next index version of the demo engine (``demo-ix-NNNN``; ``-degraded`` with a
    degraded engine, ``-parser`` with a degraded document parser) over the current corpus: re-extract
    the demo workbook with the build's parser, write ``root/index/manifest.json`` atomically and
    return the manifest."""
    root = Path(root)
    corpus = root / "corpus.jsonl"
    _check_root(root, None)
    if not corpus.is_file():
        raise InputError(str(corpus), "no demo corpus: run init_demo first")
    path = root / "index" / "manifest.json"
    number = _index_number(path) + 1
    suffix = ("-degraded" if degraded else "") + ("-parser" if degraded_parser else "")
    manifest = _manifest(
        f"{INDEX_PREFIX}{number:04d}{suffix}",
        now or datetime.now(UTC),
        file_sha256(corpus),
        DEGRADED if degraded else HEALTHY,
        DEGRADED_PARSER if degraded_parser else HEALTHY_PARSER,
    )
    replaced = _read_manifest(path) or {}
    if replaced.get("index_version"):  # the history the rebuild sensor names superseded versions from
        earlier = replaced.get("previous_versions")
        history = [str(v) for v in earlier] if isinstance(earlier, list) else []
        manifest["previous_versions"] = [*history, str(replaced["index_version"])][-HISTORY:]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_extraction_demo(root, degraded=degraded_parser)
    write_text_atomically(path, _json(manifest), "index manifest")
    return manifest


def replay_golden(root: Path, *, ts: float | str | None = None) -> list[dict[str, Any]]:
    """The live index's engine answering every golden question: one trace per case, keyed by case id,
    relative periods resolved on the case's ``reference_date`` when it has one."""
    root = Path(root)
    engine = ReferenceEngine.from_manifest(root / "index" / "manifest.json")
    with open(root / "golden" / "gold.jsonl", encoding="utf-8") as fh:
        cases = [json.loads(line) for line in fh if line.strip()]
    return [
        engine.answer(case["case_id"], case["question"], ts=ts, reference_date=case.get("reference_date"))
        for case in cases
    ]


# -- index manifests -------------------------------------------------------------------------------


def _manifest(
    version: str, built_at: datetime, corpus_hash: str, config: EngineConfig, parser: str = HEALTHY_PARSER
) -> dict[str, Any]:
    return {
        "index_version": version,
        "built_at": _iso(built_at),
        "corpus_hash": corpus_hash,
        "corpus": "../corpus.jsonl",
        "engine": config.to_dict(),
        "parser": parser,  # the document parser of this build: it extracted the demo workbook
    }


def _ensure_manifest(root: Path, path: Path, today: date) -> str | None:
    """Keep a manifest built from the current corpus (a later rebuild survives a re-run of init); else
    publish the first index (built the evening before the first day of traffic), or, when the corpus
    changed under an existing index, a healthy rebuild dated today. Returns the kept version, or None
    when a manifest was written."""
    corpus_hash = file_sha256(root / "corpus.jsonl")
    current = _read_manifest(path)
    if current is not None:
        if current.get("corpus_hash") == corpus_hash and "index_version" in current:
            return str(current["index_version"])
        if _index_number(path) > 0:
            rebuild_index(root, now=_at(today, 0))
            return None
    built_at = _at(today - timedelta(days=DAYS + 1), 22)
    first = _manifest(FIRST_INDEX_VERSION, built_at, corpus_hash, HEALTHY)
    write_text_atomically(path, _json(first), "index manifest")
    return None


def _index_number(path: Path) -> int:
    """The number of the demo index a manifest names (0 when there is none)."""
    version = (_read_manifest(path) or {}).get("index_version", "")
    match = re.fullmatch(rf"{re.escape(INDEX_PREFIX)}(\d+)(-degraded)?(-parser)?", str(version))
    return int(match.group(1)) if match else 0


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """The demo's manifest as an object; None when there is none. One that is not a JSON object (a
    list, not UTF-8, nested too deep, not a regular file) is a one-line InputError."""
    if not os.path.lexists(path):
        return None
    raw = inputs.loads(inputs.read_text(path, "index manifest"), str(path))
    if not isinstance(raw, dict):
        raise InputError(str(path), f"expected a JSON object, got {json_type(raw)}")
    return raw


# -- before the first write -----------------------------------------------------------------------

EARLIEST_TODAY = date(1970, 1, 1) + timedelta(days=DAYS + 2)


def _check_root(root: Path, today: date | None) -> None:
    """What :func:`init_demo` and :func:`rebuild_index` would trip over half-way, found before they write
    anything: a ``today`` too early for the days before it, a root or sub-folder that is not a folder, a
    file the demo writes that is not a regular file (a directory, a FIFO, a link loop), a manifest
    that is not a JSON object, a golden lock that cannot be read. Each is a one-line InputError."""
    if today is not None and today < EARLIEST_TODAY:
        raise InputError(
            "--today",
            f"{today.isoformat()} is too early: the demo writes the {DAYS + 1} days before it, so it must "
            f"be between {EARLIEST_TODAY.isoformat()} and {date.max.isoformat()}",
        )
    folders = [root, *(root / sub for sub in ("golden", "index", "traces", "extraction"))]
    if today is not None:
        days = (today - timedelta(days=n) for n in range(1, DAYS + 1))
        folders += [root / "traces" / f"dt={day.isoformat()}" for day in days]
    for folder in folders:
        if os.path.lexists(folder) and not folder.is_dir():
            raise InputError(str(folder), "the demo needs a folder here, and this is not one")
    files = [root / name for name in ("corpus.jsonl", "evidence.jsonl", "gates.yaml")]
    files += [root / "golden" / "gold.jsonl", golden.lock_path(root / "golden" / "gold.jsonl")]
    files += [root / "index" / "manifest.json"]
    files += [root / "extraction" / name for name in ("truth.json", "facts.jsonl", "baseline.json")]
    for folder in folders[5:]:
        files += [folder / "part-00000.jsonl", folder / "part-00000.jsonl.gz"]
    for path in files:
        if os.path.lexists(path):
            inputs.check_regular(path, "demo file")
    _read_manifest(root / "index" / "manifest.json")
    golden.read_lock(root / "golden" / "gold.jsonl")


# -- golden set ------------------------------------------------------------------------------------


def _freeze_once(gold: Path, frozen_at: datetime) -> bool:
    """Freeze the golden set unless its lock already holds this content, version and approver, so
    that the lock (and its ``frozen_at``) stays byte-identical across re-runs. True when written."""
    status = golden.verify(gold)
    lock = status.lock
    if status.status == "ok" and lock.version == GOLDEN_VERSION and lock.approved_by == GOLDEN_APPROVER:
        return False
    golden.freeze(gold, GOLDEN_VERSION, GOLDEN_APPROVER, now=frozen_at)
    return True


# -- production traffic ----------------------------------------------------------------------------


def production_engine() -> ReferenceEngine:
    """The engine that served the demo's production traffic: the first index, whatever has been rebuilt
    since."""
    return ReferenceEngine([Chunk.from_dict(r) for r in chunk_rows()], HEALTHY, FIRST_INDEX_VERSION)


def production_day_lines(engine: ReferenceEngine, day: date, traces_per_day: int, seed: int) -> list[str]:
    """One day of production traces as JSON lines, in time order (a pure function of its arguments)."""
    rng = np.random.default_rng([seed, day.toordinal()])
    n = max(1, round(traces_per_day * rng.uniform(0.8, 1.2)))
    workflows = list(WORKFLOW_SHARE)
    mix = np.array([WORKFLOW_SHARE[w] for w in workflows]) * rng.uniform(0.7, 1.3, len(workflows))
    # Its own stream, so that the day's other draws (and so its traffic) do not depend on it.
    unanswerable = np.random.default_rng([seed, day.toordinal(), 1]).uniform(*UNANSWERABLE_SHARE)
    slowdown = rng.uniform(0.9, 1.25)  # shared load on the model endpoint that day

    chosen = rng.choice(len(workflows), size=n, p=mix / mix.sum())
    off_pool = rng.random(n) < unanswerable
    seconds = np.sort(
        rng.choice(24, size=n, p=HOURLY / HOURLY.sum()) * 3600 + rng.integers(0, 3600 * 1000, n) / 1000
    )
    channels = rng.choice(len(CHANNELS), size=n, p=CHANNEL_SHARE)
    regions = rng.choice(len(REGIONS), size=n, p=REGION_SHARE)
    style = rng.random((n, 2))
    picks = rng.random(n)
    start = datetime.combine(day, time(0), UTC)

    records = []
    for i in range(n):
        workflow = workflows[chosen[i]]
        pool = PRODUCTION_QUESTIONS[workflow]["unanswerable" if off_pool[i] else "answerable"]
        question = pool[int(picks[i] * len(pool))]
        if style[i, 0] < 0.15:  # typed in a hurry
            question = question.lower()
        if style[i, 1] < 0.10:
            question = question.rstrip("?")
        request_id = f"req-{day:%Y%m%d}-{_digest(f'{seed}:{day}:{i}')}"
        ts = _iso_ms(start + timedelta(seconds=float(seconds[i])))
        trace = engine.answer(request_id, question, ts=ts)
        trace["latency_ms"] = round(trace["latency_ms"] * slowdown)
        records.append(
            {
                "request_id": request_id,
                **{k: v for k, v in trace.items() if k != "qid"},
                "tags": {
                    "workflow": workflow,
                    "channel": CHANNELS[channels[i]],
                    "region": REGIONS[regions[i]],
                },
            }
        )
    lines = [jsonl_line(r) for r in records]
    if day.toordinal() % DAYS == 4:
        lines = _with_bad_lines(lines, records, rng)
    return lines


def _with_bad_lines(lines: list[str], records: list[dict], rng: np.random.Generator) -> list[str]:
    """Add what a real log shipper produces now and then: a line cut off mid-write, a record whose
    ``selected_context_ids`` was serialised as a string, and a client retry (a repeated request id)."""
    n = len(lines)
    a, b, c = (int(x) for x in np.sort(rng.choice(n, size=3, replace=False)))
    wrong_type = dict(records[b], request_id=records[b]["request_id"] + "x")
    wrong_type["selected_context_ids"] = ",".join(records[b]["selected_context_ids"])
    retry = dict(records[a], latency_ms=records[a]["latency_ms"] + 37)
    out = list(lines)
    out.insert(c + 1, jsonl_line(retry))
    out.insert(b + 1, jsonl_line(wrong_type))
    out.insert(a + 1, lines[a][: len(lines[a]) // 2])
    return out


def _write_partition(traces: Path, day: date, text: str) -> bool:
    """``dt=<day>/part-00000.jsonl``; one day in seven (by date, stable across runs) gzipped."""
    folder = traces / f"dt={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    if day.toordinal() % DAYS == 0:
        # mtime=0 and no file name in the header: the same content gives the same bytes.
        return write_if_changed(
            folder / "part-00000.jsonl.gz", gzip.compress(text.encode("utf-8"), mtime=0), "traces"
        )
    return write_if_changed(folder / "part-00000.jsonl", text, "traces")


# -- helpers ---------------------------------------------------------------------------------------


def _json(obj: dict) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _at(day: date, hour: int) -> datetime:
    return datetime.combine(day, time(hour), UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso_ms(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=5).hexdigest()
