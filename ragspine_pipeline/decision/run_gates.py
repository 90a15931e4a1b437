"""Which gates a run applies: the configured list, else the defaults of the dialects its golden set and
traces carry, else (a RAGSpine baseline with QA cases) none but the baseline."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.decision.gates import Gate, default_gates
from ragspine_pipeline.scoring.join import join_traces
from ragspine_pipeline.scoring.qa_gates import has_qa_cases


def default_gates_for(gold: pa.Table, traces: pa.Table) -> list[Gate]:
    """The gates of a run given no gate list: those of the dialects the golden set and traces carry.

    * The grounded (WFGY) gates (``gates.DEFAULT_GATES``) when some trace that joins a gold case carries
      retrieval or citation data — a non-empty ``citations`` or ``retrieved_ids`` list — or when the
      golden set has no QA case (a WFGY golden set is measured by them whatever its traces carry).
    * The RAGSpine QA gates and ``fabrication <= 0`` (``gates.DEFAULT_QA_GATES``) when the golden set has
      QA cases (``case_type`` / ``expected``). Traces that report no ``outcome`` fail them rather than
      escape them: the golden set says what is measured.
    * No layered or judged defaults: those gates are configured.

    So a RAGSpine golden set answered without citations is gated by the QA gates only, a WFGY one by the
    grounded gates, a mixed one (or QA cases answered with citations) by both; never by none.
    """
    qa = has_qa_cases(gold)
    return default_gates(grounded=not qa or _cites_or_retrieves(gold, traces), qa=qa)


RAGSPINE_VERDICT = (
    "the baseline is RAGSpine's qa_baseline.json and no gate list is given: the verdict is RAGSpine's, "
    "against the baseline only (the QA floors of the defaults apply when --gates or the gates config "
    "lists them)"
)


def run_gates(
    configured: Sequence[Gate] | None, gold: pa.Table, traces: pa.Table, ragspine_baseline: bool = False
) -> tuple[list[Gate], list[str]]:
    """The gates a run applies, and what the run says about them: the configured list when there is one;
    else, when the baseline is RAGSpine's ``qa_baseline.json`` and the golden set has QA cases, none —
    RAGSpine gates a release on its baseline only, so a release it ships is not blocked here by a floor
    it never had (the decision says so: :data:`RAGSPINE_VERDICT`); else :func:`default_gates_for`."""
    if configured:
        return list(configured), []
    if ragspine_baseline and has_qa_cases(gold):
        return [], [RAGSPINE_VERDICT]
    return default_gates_for(gold, traces), []


def _cites_or_retrieves(gold: pa.Table, traces: pa.Table) -> bool:
    """Whether a trace that joins a gold case has a non-empty citation or retrieved-id list."""
    rows, _ = join_traces(gold, traces)
    carries = np.zeros(traces.num_rows, dtype=bool)
    for name in ("citations", "retrieved_ids"):
        if name in traces.column_names:
            lengths = pc.fill_null(pc.list_value_length(traces.column(name)), 0)
            carries |= np.asarray(pc.greater(lengths, 0), dtype=bool)
    if rows is None:  # the identity join: every trace is a gold case's
        return bool(carries.any())
    matched = np.asarray(rows.drop_null(), dtype=np.int64)
    return bool(carries[matched].any())
