"""What counts as a refusal, as a team configures it: phrases and regular expressions.

An answer is a refusal when its trace says so (``outcome.refused``). Otherwise, by default, when its
text is exactly ``not in context`` (case and surrounding whitespace aside: ``scoring.grounded.refusals``).
A gates config may replace that default with its own ``refusals:``

* ``phrases``: the answer, case-folded (``str.casefold``: ``Straße`` matches ``STRASSE``) with every
  run of whitespace made one space and the ends trimmed, equals one of the phrases normalised alike;
* ``patterns``: a regular expression (Python ``re``) found anywhere in the answer normalised alike.

:func:`mark_refusals` applies such a rule once, before any metric reads the traces, by filling in the
traces' ``outcome_refused`` where a trace does not say: every metric that honours the trace's own flag
(refusal rate, under- and over-refusal, precision, compliance, the QA gates, production) then counts
the configured refusals, and an answer the rule does not match is not one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.contracts.trace import REFUSAL_TOKEN

DEFAULT_PHRASES = (REFUSAL_TOKEN,)


def normalise(text: str) -> str:
    """Case-folded, whitespace runs made one space, ends trimmed."""
    return " ".join(text.casefold().split())


def is_default(phrases: Sequence[str], patterns: Sequence[str]) -> bool:
    return not patterns and [normalise(p) for p in phrases] == [REFUSAL_TOKEN]


def mark_refusals(traces: pa.Table, phrases: Sequence[str], patterns: Sequence[str]) -> pa.Table:
    """``traces`` with ``outcome_refused`` filled in by the rule where it is null (unchanged under the
    default rule, which the metrics apply themselves)."""
    if is_default(phrases, patterns) or "outcome_refused" not in traces.column_names:
        return traces
    wanted = {normalise(phrase) for phrase in phrases}
    compiled = [re.compile(pattern) for pattern in patterns]

    def refusal(claim: str | None) -> bool:
        text = normalise(claim or "")
        return text in wanted or any(pattern.search(text) for pattern in compiled)

    said = traces.column("outcome_refused")
    matched = pa.array([refusal(claim) for claim in traces.column("claim").to_pylist()], pa.bool_())
    column = traces.column_names.index("outcome_refused")
    return traces.set_column(column, traces.field(column), pc.coalesce(said, matched))
