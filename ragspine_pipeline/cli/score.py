"""``ragspine-eval score``: metrics, gates and the release decision for a golden set and its traces.

Exit codes: 0 the release ships (every gate, slice and baselined metric holds), 1 it is blocked, 2 the
input is unusable (``main`` prints the error on one line), whatever the ``--format``: ``json`` and
``markdown`` are this pipeline's report (``reports.evaluation``), ``ragspine`` and ``ragspine-text``
RAGSpine's (``reports.ragspine_format``; they need a golden set with QA cases).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime

import numpy.ma  # noqa: F401 - imported here, in one thread: see _gold_and_traces
import pyarrow as pa

from ragspine_pipeline.cli.args import EXIT_GATE_FAILED, EXIT_PASS, UsageError, span_settings
from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.contracts.spans import SpanSettings
from ragspine_pipeline.decision import baseline as baselines
from ragspine_pipeline.decision import golden
from ragspine_pipeline.decision.config import EvalConfig, load_config
from ragspine_pipeline.decision.coverage import coverage_warnings
from ragspine_pipeline.decision.evaluation import (
    KNOWN_METRICS,
    LAYERED_METRICS,
    Evaluation,
    evaluate,
    metric_scope,
    with_baseline,
    with_index_check,
    with_replays,
)
from ragspine_pipeline.decision.gates import Gate, GateSpecError, parse_gates
from ragspine_pipeline.decision.promotion import promoted_entry
from ragspine_pipeline.decision.run_gates import run_gates
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import atomic_writer, write_text_atomically
from ragspine_pipeline.inputs import file_kind
from ragspine_pipeline.metrics import Scope
from ragspine_pipeline.reports.evaluation import ReportInputs, report_warnings, write_json, write_markdown
from ragspine_pipeline.reports.explorer import baseline_cases, explorer_document, render_explorer
from ragspine_pipeline.reports.metric_table import metric_table
from ragspine_pipeline.reports.ragspine_format import FORMATS as RAGSPINE_FORMATS
from ragspine_pipeline.reports.ragspine_format import write_ragspine_json, write_ragspine_text
from ragspine_pipeline.scoring.qa_gates import has_qa_cases
from ragspine_pipeline.sources.replay_record import record_release, record_warnings
from ragspine_pipeline.sources.versioned import open_versioned, s3_endpoint


def run_score(args: argparse.Namespace) -> int:
    if args.promote and not args.baseline:
        raise UsageError("--promote needs --baseline")
    mode = args.mode or baselines.DEFAULT_MODE
    # Old names whose metric depends on the registry (``faithfulness``) are read as this run means them.
    scope = metric_scope(args.evidence)
    config = load_config(args.config, KNOWN_METRICS, scope) if args.config else EvalConfig()
    if args.references:
        _check_references(args.references, "--references")
        config = config.model_copy(update={"references": args.references})
    elif config.references is not None and os.path.lexists(config.references):
        _check_references(config.references, "references")
    gates = _gates(args, config, scope)
    layered_gates = [g.metric for g in gates or () if g.metric in LAYERED_METRICS]
    if layered_gates and not args.evidence:
        raise UsageError(f"gates on {', '.join(layered_gates)} need --evidence")
    warnings: list[str] = []
    lock, unfrozen = golden.verified_lock(args.gold)
    warnings += [unfrozen] if unfrozen else []
    store, entry, ragspine_baseline = None, None, False
    if args.baseline:  # read first: a broken baseline should not cost a full scoring pass
        store = open_versioned(args.baseline, "baseline", endpoint_url=s3_endpoint())
        text = store.read()
        entry = baselines.parse_baseline(text, store.name, scope)[1].get(mode)
        ragspine_baseline = baselines.is_ragspine_file(text, store.name)
    run_id = args.run_id or f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    spans = span_settings(args)
    gold, traces, notes = _gold_and_traces(args.gold, args.trace[0], spans)
    warnings += notes
    if args.format in RAGSPINE_FORMATS and not has_qa_cases(gold):
        raise UsageError(
            f"--format {args.format} needs RAGSpine QA cases (case_type, expected) in {args.gold}"
        )
    evidence = load_evidence(args.evidence).table if args.evidence else None
    gates, said = run_gates(gates, gold, traces, ragspine_baseline)
    warnings += said

    evaluation = evaluate(
        gold,
        traces,
        gates=gates,
        config=config,
        run_id=run_id,
        evidence=evidence,
        lock=lock,
        k=args.k,
        expected_index_version=args.index_version,
    )
    if len(args.trace) > 1:
        replays = []
        for path in args.trace[1:]:
            replay, notes = _traces(path, spans)
            replays.append(replay)
            warnings += notes
        evaluation = with_replays(evaluation, gold, replays, config=config, evidence=evidence, k=args.k)
        named = list(zip(args.trace, [traces, *replays], strict=True))
        evaluation = with_index_check(evaluation, named, args.index_version)
    if store is not None:
        evaluation, promoted = _judge_against_baseline(args, mode, store, evaluation, config, run_id, scope)
        if args.promote:
            warnings.append(_promotion_note(args.baseline, mode, evaluation, promoted))
    warnings += [warning for path in args.trace for warning in record_warnings(path)]  # reuses named
    warnings += coverage_warnings(evaluation, traces)
    if evaluation.comparison is not None and evaluation.comparison.unmeasured:
        unmeasured = ", ".join(evaluation.comparison.unmeasured)
        warnings.append(f"baseline metrics not measured by this run: {unmeasured}")
    inputs = ReportInputs(args.gold, args.trace[0], args.evidence, warnings)
    for warning in report_warnings(evaluation, inputs):
        print(f"ragspine-eval: warning: {warning}", file=sys.stderr)
    with _output(args.out) as out:
        if args.format in RAGSPINE_FORMATS:  # RAGSpine's report of the same run: its golden set, its mode
            ragspine = write_ragspine_json if args.format == "ragspine" else write_ragspine_text
            ragspine(evaluation, gold, mode, out)
        else:
            write = write_json if args.format == "json" else write_markdown
            write(evaluation, inputs, out)
    if args.explorer:
        _write_explorer(args.explorer, evaluation, gold, traces, entry)
    if args.out is not None and not _is_stdout(args.out):  # a file: the verdict still reaches the terminal
        print(f"decision: {evaluation.release.verdict()}")
    return EXIT_PASS if evaluation.passed else EXIT_GATE_FAILED


def _write_explorer(
    path: str, evaluation: Evaluation, gold: pa.Table, traces: pa.Table, entry: baselines.BaselineEntry | None
) -> None:
    """The case explorer page; flips against the per-case outcomes the baseline entry kept (paired
    mode), the baseline as read before this run (no reports folder here to read its run's report)."""
    document = explorer_document(evaluation, gold, traces, metric_table(evaluation), baseline_cases(entry))
    write_text_atomically(path, render_explorer(document), "case explorer")


def _gold_and_traces(
    gold_path: str, trace_path: str, spans: SpanSettings
) -> tuple[pa.Table, pa.Table, tuple[str, ...]]:
    """The golden set and the first traces, read at the same time: parsing one file leaves a core idle
    in the stretches its own work is single-threaded. A broken golden set is reported first.

    numpy.ma is imported with this module, before the two threads start: both readers hand numpy arrays
    to pyarrow, which looks at ``np.ma`` and so imports it lazily; two threads importing it at once can
    meet in Python's import locks, and the one handed the half-imported module recursed in numpy's
    ``__getattr__`` (RecursionError, exit 3: seen once in twenty concurrent runs on a loaded machine)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        gold = pool.submit(load_gold, gold_path)
        try:
            traces, notes = _traces(trace_path, spans)
        except BaseException:
            gold.result()
            raise
        return gold.result().table, traces, notes


def _traces(path: str, spans: SpanSettings) -> tuple[pa.Table, tuple[str, ...]]:
    """The traces of one ``--trace`` file. A file without any (empty, or blank lines only) is unusable
    input even when another replay has traces: the CI step that wrote it is broken, and scoring it would
    only report every case as missing."""
    loaded = load_traces(path, spans)
    if loaded.table.num_rows == 0:
        raise InputError(path, "no traces")
    return loaded.table, tuple(f"{path}: {note}" for note in loaded.notes)


def _check_references(path: str, where: str) -> None:
    """The reference texts must be a directory: anything else (missing, a FIFO, a device, a plain file)
    is a one-line error, whether or not a case of this golden set needs them."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise InputError(path, f"{where}: cannot use the reference texts: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        kind = file_kind(mode)
        raise InputError(
            path, f"{where}: the reference texts must be a directory (one file per narrative_doc), not {kind}"
        )


def _gates(args: argparse.Namespace, config: EvalConfig, scope: Scope) -> list[Gate] | None:
    """The user's complete gate set: ``--gates``, else the config's; None when neither gives one."""
    if args.gates is not None:
        try:
            return parse_gates(args.gates, KNOWN_METRICS, scope)
        except GateSpecError as exc:
            raise UsageError(f"--gates: {exc}") from None
    return config.gate_list(KNOWN_METRICS, scope)


def _judge_against_baseline(
    args: argparse.Namespace,
    mode: str,
    store,
    evaluation: Evaluation,
    config: EvalConfig,
    run_id: str,
    scope: Scope,
) -> tuple[Evaluation, bool]:
    """Compare the run with the baseline as it is under the baseline's lock, and (with ``--promote``)
    ratchet it in the same update: ``(the judged evaluation, whether the baseline moved)``. A concurrent
    run's promotion is never compared against a stale copy, and never lowered."""
    judged, promoted = evaluation, False
    # The paired pool's founding release has every run pooled (decision.paired): whose run this is.
    release = args.release or record_release(args.trace[0])

    def judge(entry: baselines.BaselineEntry | None) -> baselines.BaselineEntry | None:
        nonlocal judged, promoted
        judged = with_baseline(evaluation, entry, config)
        new = promoted_entry(judged, entry, config, run_id, release) if args.promote else None
        promoted = new is not None
        return new

    baselines.locked_update(store, mode, KNOWN_METRICS, judge, scope)
    return judged, promoted


def _promotion_note(baseline: str, mode: str, evaluation: Evaluation, promoted: bool) -> str:
    if not evaluation.passed and promoted:  # decision.paired, rule 2: pooled, not promoted
        return (
            f"not promoting {baseline}: the release is blocked; as a run of the release that founded its "
            "reference pool, its case outcomes joined the pool (recorded in pool_history)"
        )
    if not evaluation.passed:
        return f"not promoting {baseline}: the release is blocked, the baseline is unchanged"
    if not promoted:
        return (
            f"not promoting {baseline}: its reference pool is full and this run is no significant "
            "improvement (paired test), it is unchanged"
        )
    return f"promoted {baseline} (mode {mode}): every listed metric is now at least as strict"


def _is_stdout(path: str) -> bool:
    """Whether ``path`` is standard output itself (``/dev/stdout``, a link to its pipe): the report went
    there, and a verdict line after it would corrupt it."""
    try:
        target, out = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no such file, or a stdout with no descriptor
        return False
    return (target.st_dev, target.st_ino) == (out.st_dev, out.st_ino)


@contextmanager
def _output(path: str | None):
    if path is None:
        yield sys.stdout
        return
    with atomic_writer(path, "report") as fh:  # a reader never sees half a report
        yield fh
