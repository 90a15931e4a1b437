"""Why a release fails, in the words of the pipeline: where the failing cases stop, and the worst of them.

:func:`release_causes` condenses one run's per-case results into the ``causes`` object of the release
decision::

    {"cases": 84, "failing": 47,
     "first_failed_stage": {"admissibility": 36, "candidate retrieval": 4, ...},
     "inadmissible_rules": {"stale": 27, "restricted": 9},
     "worst_cases": [{"qid": "q017", "question": "How long are …", "first_failed_stage": "admissibility",
                      "rules": ["stale"], "label": "ANS_NO_HIT"}, ...]}

A failing case's *cause* is its first failed stage, or its grounded label when the run has no layered
evaluation: what ``first_failed_stage`` counts, and what the worst cases are chosen to cover — the worst
case of each cause first, so three worst cases never repeat one cause while another goes unnamed.

:func:`cause_sentence` and :func:`worst_case_line` turn it into plain text (no Markdown) for every report
and message, so they all say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.redaction import redact_text
from ragspine_pipeline.scoring.layered import STAGES, LayeredScore

WORST_CASES = 3
QUESTION_CHARS = 80
# Grounded labels (``scoring.grounded.LABELS``) that fail a case, worst first; ``OK`` and ``REFUSAL_OK`` pass.
FAILING_LABELS = ("HALLUCINATION", "ANS_NO_HIT", "OVER_REFUSAL")
PASS = STAGES.index("pass")


def release_causes(
    gold: pa.Table, grounded_cases: pa.Table, layered: LayeredScore | None, *, worst: int = WORST_CASES
) -> dict:
    """The ``causes`` of one run: how many cases fail, where they stop, and the ``worst`` cases.

    ``grounded_cases`` is ``GroundedScore.cases`` and ``layered`` the layered evaluation (None without
    an evidence registry); both are read row for row against ``gold`` when their ``qid`` columns match
    it, else joined on ``qid``. Keys:

    * ``cases``: gold cases; ``failing``: cases that are not releasable (with layered data), else cases
      whose grounded label is neither ``OK`` nor ``REFUSAL_OK``;
    * ``first_failed_stage``: failing cases per first failed stage, stages with no case left out, in
      pipeline order; None without layered data;
    * ``inadmissible_rules``: cases per broken admissibility rule (a case may break several), rules with
      no case left out, most cases first, then by rule name; empty without layered data;
    * ``worst_cases``: at most ``worst`` failing cases, worst first, covering as many causes as they can
      (:func:`_worst_rows`). Worse means, with layered data: earliest first failed stage, then more
      broken rules, then qid; without: by label (``HALLUCINATION``, ``ANS_NO_HIT``, ``OVER_REFUSAL``),
      then qid. Each names its ``qid``, ``question`` (see :func:`short_question`),
      ``first_failed_stage`` (None without layered data), broken ``rules`` and grounded ``label``.
    """
    qid = gold.column("qid").combine_chunks()
    labels = _aligned(grounded_cases, qid).column("label")
    if layered is None:
        rank = _codes(labels, FAILING_LABELS)
        failing = rank >= 0
        stage, broken, stages, rules = np.full(len(qid), -1), None, None, {}
        cause = rank
        order = pa.table({"rank": rank, "qid": qid})
        sort_keys = [("rank", "ascending"), ("qid", "ascending")]
    else:
        cases = _aligned(layered.cases, qid)
        stage = _codes(cases.column("first_failed_stage"), STAGES)
        failing = (stage >= 0) & (stage != PASS)
        histogram = np.bincount(stage[failing], minlength=len(STAGES))
        stages = {STAGES[i]: int(histogram[i]) for i in np.flatnonzero(histogram)}
        broken = cases.column("inadmissible").combine_chunks()
        rules = _rule_counts(pc.list_flatten(broken))
        n_rules = pc.fill_null(pc.list_value_length(broken), 0)
        cause = stage
        order = pa.table({"stage": stage, "rules": n_rules, "qid": qid})
        sort_keys = [("stage", "ascending"), ("rules", "descending"), ("qid", "ascending")]

    candidates = np.flatnonzero(failing)
    rows = candidates[_worst_rows(order.take(candidates), cause[candidates], sort_keys, worst)]
    chosen = pa.array(rows, pa.int64())
    rule_lists = [[] for _ in rows] if broken is None else broken.take(chosen).to_pylist()
    worst_cases = [
        {
            "qid": case_qid,
            "question": short_question(question),
            "first_failed_stage": STAGES[stage[row]] if stage[row] >= 0 else None,
            "rules": case_rules or [],
            "label": label,
        }
        for row, case_qid, question, case_rules, label in zip(
            rows.tolist(),
            qid.take(chosen).to_pylist(),
            gold.column("question").take(chosen).to_pylist(),
            rule_lists,
            _plain(labels.take(chosen)).to_pylist(),
            strict=True,
        )
    ]
    return {
        "cases": len(qid),
        "failing": int(failing.sum()),
        "first_failed_stage": stages,
        "inadmissible_rules": rules,
        "worst_cases": worst_cases,
    }


def _worst_rows(order: pa.Table, cause: np.ndarray, sort_keys: list, worst: int) -> np.ndarray:
    """The positions of ``worst`` rows of ``order`` in ``sort_keys`` order (whose first key is ``cause``):
    the first row of each cause, the causes in that order, then the first of the rest.

    The keys end in the qid, which is unique: there are no ties to break. Each cause is one selection
    over its rows; there are a handful of causes (stages or labels), whatever the number of cases.
    """
    if worst <= 0 or order.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    leaders = []
    for code in np.unique(cause)[:worst]:  # ascending: the worst cause first
        members = np.flatnonzero(cause == code)
        leaders.append(int(members[pc.select_k_unstable(order.take(members), 1, sort_keys)[0].as_py()]))
    top = np.asarray(pc.select_k_unstable(order, worst, sort_keys))
    rest = top[~np.isin(top, leaders)][: worst - len(leaders)]
    chosen = np.concatenate([np.asarray(leaders, dtype=np.int64), rest.astype(np.int64)])
    return chosen[np.asarray(pc.sort_indices(order.take(chosen), sort_keys))]


def short_question(question: str | None) -> str:
    """A question fit to show anywhere: PII redacted (``redaction``), whitespace runs folded to
    one space, cut to :data:`QUESTION_CHARS` characters ending in ``…`` when longer; "" when missing."""
    if not question:
        return ""
    text = " ".join(redact_text(question)[0].split())
    return text if len(text) <= QUESTION_CHARS else text[: QUESTION_CHARS - 1].rstrip() + "…"


def cause_sentence(causes: Mapping | None) -> str | None:
    """The causes as one plain-text sentence; None when nothing fails (or there are no causes).

    With layered data: ``36 of 84 cases fail first at admissibility (27 stale, 9 restricted); 4 at
    candidate retrieval``. Without: ``5 of 84 cases fail (no evidence registry: failed stages unknown)``.
    """
    if not causes or not causes.get("failing"):
        return None
    total, stages = causes.get("cases"), causes.get("first_failed_stage")
    if not stages:
        failing = causes["failing"]
        return f"{failing} of {total} cases {_fail(failing)} (no evidence registry: failed stages unknown)"
    parts = []
    for stage, count in stages.items():
        part = f"{count} at {stage}" if parts else f"{count} of {total} cases {_fail(count)} first at {stage}"
        rules = causes.get("inadmissible_rules") or {}
        if stage == "admissibility" and rules:
            part += " (" + ", ".join(f"{n} {rule_name(rule)}" for rule, n in rules.items()) + ")"
        parts.append(part)
    return "; ".join(parts)


def worst_case_reason(case: Mapping) -> str:
    """Where a worst case fails, as plain text: ``admissibility: stale``, ``candidate retrieval``, or its
    grounded label when the run had no layered evaluation."""
    stage = case.get("first_failed_stage")
    if not stage:
        return str(case.get("label") or "failing")
    rules = case.get("rules") or []
    return f"{stage}: {', '.join(map(rule_name, rules))}" if rules else str(stage)


def worst_case_line(case: Mapping) -> str:
    """A worst case as one plain-text line: ``q017 (admissibility: stale): How long are …``."""
    head = f"{case.get('qid')} ({worst_case_reason(case)})"
    return f"{head}: {case['question']}" if case.get("question") else head


def rule_name(rule: object) -> str:
    """An admissibility rule as words: ``missing_trace`` → ``missing trace``."""
    return str(rule).replace("_", " ")


def _fail(count: object) -> str:
    return "fails" if count == 1 else "fail"


def _aligned(cases: pa.Table, qid: pa.Array) -> pa.Table:
    """``cases`` row for row with the gold ``qid`` column (joined on qid unless it already is; a gold
    case with no row gets a null row)."""
    own = cases.column("qid").combine_chunks()
    if len(own) == len(qid) and pc.all(pc.fill_null(pc.equal(own, qid), False)).as_py() in (True, None):
        return cases
    return cases.take(pc.index_in(qid, value_set=own))


def _codes(column: pa.ChunkedArray | pa.Array, names: tuple[str, ...]) -> np.ndarray:
    """Each value's position in ``names``; -1 for a null or a value not listed."""
    if pa.types.is_dictionary(column.type):  # look up the few dictionary values, not every row
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        parts = [np.zeros(0, dtype=np.int64)]
        for chunk in chunks:
            lookup = np.append(_codes(chunk.dictionary, names), -1)  # the last entry: a null row
            parts.append(lookup[np.asarray(pc.fill_null(chunk.indices, len(chunk.dictionary)))])
        return np.concatenate(parts)
    codes = pc.index_in(_plain(column), value_set=pa.array(names, pa.string()))
    return np.asarray(pc.fill_null(codes, -1), dtype=np.int64)


def _plain(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One string array (a dictionary column decoded)."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(pa.string())
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _rule_counts(rules: pa.Array) -> dict[str, int]:
    """Cases per rule name (each case lists a rule once), most first, then by name."""
    counts = pc.value_counts(rules.drop_null())
    if len(counts) == 0:
        return {}
    ranked = pa.table({"rule": counts.field("values"), "n": counts.field("counts")}).sort_by(
        [("n", "descending"), ("rule", "ascending")]
    )
    return dict(zip(ranked.column("rule").to_pylist(), ranked.column("n").to_pylist(), strict=True))
