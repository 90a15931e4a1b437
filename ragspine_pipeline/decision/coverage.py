"""What a reader of a run's report must know about its coverage: traces missing, unmatched or
duplicated, snippets too short to be found, inputs no trace carried, cases a metric could not measure."""

from __future__ import annotations

import pyarrow as pa

from ragspine_pipeline.contracts.schemas import carried
from ragspine_pipeline.decision.evaluation import Evaluation
from ragspine_pipeline.metrics import RETRIEVAL_FIELDS, absent_inputs, trace_fields


def coverage_warnings(evaluation: Evaluation, traces: pa.Table | None = None) -> list[str]:
    """What a reader of the report must know about the join of gold and traces (missing, unmatched and
    duplicate traces), about gold cases that can never be found contained (snippets too short), about
    cases a metric could not measure because their traces lack its input, and (given the ``traces``)
    about metrics whose value depends on a field no trace carries ("chr needs retrieved_ids: 0 of 37
    traces carry them")."""
    counts = evaluation.grounded.counts
    warnings = []
    # Only the fields a metric at 0 depends on are counted (no pass over every column of the traces).
    not_owed = RETRIEVAL_FIELDS if evaluation.grounded.citations_are_retrieved else ()
    fields = {f for name, value in evaluation.metrics.items() if value == 0 for f in trace_fields(name)}
    fields -= set(not_owed)
    if traces is not None and fields:
        counted = carried(traces, True, fields)
        absent = absent_inputs(evaluation.metrics, counted, traces.num_rows, not_owed)
        warnings += [f"{name} = {evaluation.metrics[name]:.4g} {why}" for name, why in absent.items()]
    short = evaluation.short_snippets
    if short:
        shown = ", ".join(short[:20]) + (f" and {len(short) - 20} more" if len(short) > 20 else "")
        warnings.append(
            f"{len(short)} gold case(s) have only snippets shorter than {evaluation.min_snippet_chars} "
            f"characters, which never count as found: {shown} (lengthen them, or set min_snippet_chars "
            "in the gates config)"
        )
    for rule, qids in (evaluation.grounded.seed_rules or {}).items():
        if qids:
            shown = ", ".join(qids[:20]) + (f" and {len(qids) - 20} more" if len(qids) > 20 else "")
            warnings.append(f"{len(qids)} {rule}: {shown}")
    if counts["missing"]:
        warnings.append(f"{counts['missing']} gold case(s) have no trace and are scored as empty answers")
    if counts["unmatched"]:
        warnings.append(f"{counts['unmatched']} trace id(s) are not in the golden set and were ignored")
    if counts["duplicates"]:
        warnings.append(f"{counts['duplicates']} duplicate trace(s): the last trace per case was kept")
    if evaluation.qa is not None:  # cases whose traces lack a metric's input: unmeasured, not failed
        warnings += evaluation.qa.unmeasured_notes().values()
        text_figures = evaluation.qa.text_figure_note()
        warnings += [text_figures] if text_figures else []
    return warnings
