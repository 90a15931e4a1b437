"""The golden path's first two assets: the frozen golden set, and its questions replayed through the SUT.

Thin wrappers: loading and validating are ``contracts`` and ``decision`` functions; these assets hand
their canonical tables on as DataFrames (``defs.io``), so the next step may run on another host.
Scoring and the decision are ``defs.evaluation``.
"""

import tempfile
from dataclasses import asdict
from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.contracts.columns import load_gold, load_traces
from ragspine_pipeline.contracts.schemas import GOLD_SCHEMA, TRACE_SCHEMA
from ragspine_pipeline.decision.golden import GoldenLock, verified_lock
from ragspine_pipeline.defs.io import IO_MANAGER_KEY, to_frame, to_table
from ragspine_pipeline.defs.judge import EVALUATION_POOL
from ragspine_pipeline.defs.metadata import markdown_table, user_errors
from ragspine_pipeline.defs.retries import step_retries
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.sources.answer_store import AnswerStore, Stamp, reuse_warnings
from ragspine_pipeline.sources.replay import replay

GROUP = "golden"
INDEX_VERSION_TAG = "ragspine/index_version"  # the index a re-evaluation run was requested for
REPLAY = "replay"  # golden_traces: which replay of the golden set a trace belongs to (0: the run's own)


def golden_assets(service: Service) -> list[dg.AssetsDefinition]:
    """The service's `golden_set` and `golden_traces`."""

    @dg.asset(
        key=service.key("golden_set"),
        group_name=service.node(GROUP),
        io_manager_key=IO_MANAGER_KEY,
        retry_policy=step_retries(),
    )
    def golden_set(context: dg.AssetExecutionContext) -> dg.Output[pd.DataFrame]:
        """The frozen golden set, validated line by line and verified against its freeze lock: one row per
        case (canonical columns). A golden set whose content no longer matches its lock fails here.

        `attrs`: `source` (where it was read), `lock` (version, sha256, approver; None when not
        frozen) and `warnings`.
        """
        eval_files = service.files
        path = eval_files.golden_path
        with user_errors():
            lock, unfrozen = verified_lock(path)
            table = load_gold(path).table
        if unfrozen:
            context.log.warning(unfrozen)
        unanswerable = pc.sum(pc.invert(table.column("answerable"))).as_py() or 0
        frame = to_frame(
            table,
            source=path,
            lock=None if lock is None else asdict(lock),
            warnings=[unfrozen] if unfrozen else [],
        )
        return dg.Output(
            frame,
            metadata={
                "version": lock.version if lock else "unfrozen",
                "sha256": lock.sha256 if lock else "",
                "approved_by": lock.approved_by if lock else "",
                "n_cases": table.num_rows,
                "unanswerable": unanswerable,
                "cases_per_slice": dg.MetadataValue.md(
                    markdown_table(["dimension", "value", "cases"], _cases_per_slice(table))
                ),
                "golden_path": dg.MetadataValue.path(path),
            },
        )

    @dg.asset(
        key=service.key("golden_traces"),
        io_manager_key=IO_MANAGER_KEY,
        group_name=service.node(GROUP),
        ins={"golden_set": dg.AssetIn(service.key("golden_set"))},
        pool=service.node(EVALUATION_POOL),
        retry_policy=step_retries(),
    )
    def golden_traces(context: dg.AssetExecutionContext, golden_set: pd.DataFrame) -> dg.Output[pd.DataFrame]:
        """Every golden question replayed through the SUT on its current index: one row per valid trace
        (canonical columns) and `replay` (0 for the run's own replay); `attrs`: `sut`, `replays`,
        `source` (the run's replayed traces as kept), `failed` and `reused` (the answers taken from
        earlier attempts, by the replay that stored them).

        A trace the contract rejects is quarantined and its case scored as missing. Answers are kept as
        they arrive (`sut.answers_dir`, per SUT settings, index version, release and run): a step retry
        or a re-execution of the run from its failure asks only the cases still unanswered, while a new
        run for the same index asks every case again (unless `sut.reuse_answers`). Every reuse is named
        in the log, the metadata (`answers_reused`, `reused_from`) and the decision's warnings. A case
        that could not be asked fails the step, unless `sut.max_failed_share`
        allows it: then it is scored as missing and named (`failed_cases`). Progress is logged every few
        seconds. With `sut.repeat` N above 1 the golden set is replayed N times; replays 1…N-1 only count
        towards the per-case flakiness (they keep no answers). The replayed traces and quarantined answers
        are kept under the work folder (`golden_traces/<run id>/`).
        """
        sut, eval_files, index_manifest = service.sut, service.files, service.index_manifest
        gold, _lock = gold_of(golden_set)
        columns = ("qid", "question", "reference_date")
        questions = list(zip(*(gold.column(name).to_pylist() for name in columns), strict=True))
        work = eval_files.work().child("golden_traces", context.run.run_id)
        index_version = context.run.tags.get(INDEX_VERSION_TAG) or index_manifest.live_version()
        # The replay a retry resumes: the run's, kept by a re-execution from failure (its root run).
        root_run = context.run.root_run_id or context.run.run_id
        tables, results, uris = [], [], {}
        with user_errors(), tempfile.TemporaryDirectory(prefix="ragspine-replay-") as scratch:
            opened = sut.open()
            stamp = Stamp.new(opened.release, replay=context.run.run_id)
            for number in range(sut.repeat):
                suffix = "" if number == 0 else f".replay{number + 1}"
                store = None
                if number == 0 and sut.answers_dir and opened.identity:
                    store = AnswerStore(
                        sut.answers_dir,
                        opened.identity,
                        index_version,
                        stamp,
                        within=root_run,
                        reuse_earlier=sut.reuse_answers,
                    )
                result = replay(
                    questions,
                    opened.answer,
                    out=Path(scratch) / f"traces{suffix}.jsonl",
                    quarantine=Path(scratch) / f"quarantine{suffix}.jsonl",
                    concurrency=opened.concurrency,
                    store=store,
                    max_failed_share=sut.max_failed_share,
                    where=opened.description,
                    progress=lambda progress: context.log.info(progress.line()),
                )
                table = load_traces(result.traces_path).table.cast(TRACE_SCHEMA)
                tables.append(table.append_column(REPLAY, pa.array([number] * table.num_rows, pa.int16())))
                for local in (result.traces_path, result.quarantine_path):
                    uris[local.name] = work.upload(local.name, local, "replayed traces")
                results.append(result)
        result = results[0]
        reused = reuse_warnings(result.reused_from)
        for sentence in reused:
            context.log.warning(sentence)
        if result.quarantined:
            context.log.warning(f"{result.quarantined} trace(s) quarantined: {uris['quarantine.jsonl']}")
        if result.failed:
            context.log.warning(
                f"{len(result.failed)} case(s) could not be asked and are scored as missing: "
                + ", ".join(sorted(result.failed))
            )
        versions = pc.value_counts(tables[0].column("index_version").drop_null()).to_pylist()
        frame = to_frame(
            pa.concat_tables(tables),
            sut=opened.description,
            replays=sut.repeat,
            source=uris["traces.jsonl"],
            failed=dict(result.failed),
            reused=[asdict(reuse) for reuse in result.reused_from],
            release=opened.release,
        )
        return dg.Output(
            frame,
            metadata={
                "sut": opened.description,
                "replays": sut.repeat,
                "asked": result.asked,
                "answered": result.answered,
                "answers_reused": result.reused,
                "reused_from": "; ".join(reused) or "none",
                "unanswered": result.unanswered,
                "quarantined": result.quarantined,
                "failed": len(result.failed),
                "failed_cases": dg.MetadataValue.md(
                    markdown_table(["qid", "cause"], sorted(result.failed.items()))
                    if result.failed
                    else "none"
                ),
                "answers_per_second": round(
                    (result.answered + result.unanswered - result.reused) / result.elapsed_s, 2
                )
                if result.elapsed_s > 0
                else 0.0,
                "elapsed_s": round(result.elapsed_s, 2),
                "quarantine_path": dg.MetadataValue.path(uris["quarantine.jsonl"]),
                "index_versions": ", ".join(f"{v['values']} ({v['counts']})" for v in versions) or "none",
                "traces_path": dg.MetadataValue.path(uris["traces.jsonl"]),
            },
        )

    return [golden_set, golden_traces]


def gold_of(golden_set: pd.DataFrame) -> tuple[pa.Table, GoldenLock | None]:
    """The canonical gold table and the lock it matched, from the ``golden_set`` value."""
    lock = golden_set.attrs.get("lock")
    return to_table(golden_set, GOLD_SCHEMA), None if lock is None else GoldenLock(**lock)


def replays_of(golden_traces: pd.DataFrame) -> list[pa.Table]:
    """The canonical trace table of each replay, the run's own first (from the ``golden_traces`` value)."""
    table = to_table(golden_traces)
    numbers = table.column(REPLAY)
    count = int(golden_traces.attrs.get("replays") or (pc.max(numbers).as_py() or 0) + 1)
    rest = table.drop_columns([REPLAY])
    return [rest.filter(pc.equal(numbers, number)).cast(TRACE_SCHEMA) for number in range(count)]


def _cases_per_slice(table: pa.Table) -> list[tuple[str, str, int]]:
    tags = table.column("tags").combine_chunks()
    pairs = pa.table({"dimension": tags.keys, "value": tags.items})  # every (key, value) of every case
    counts = pairs.group_by(["dimension", "value"]).aggregate([([], "count_all")])
    rows = zip(*(counts.column(c).to_pylist() for c in ("dimension", "value", "count_all")), strict=True)
    return sorted(rows)
