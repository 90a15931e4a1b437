"""The answer step of the reference engine: what to say from the selected context, and the trace's
``outcome`` that the QA gates read (``clarification_mode``, ``refused``, ``found_value`` …).

The engine retrieves, selects and extracts sentences; :func:`decide` turns that into the reply:

* **Route** — ``numeric`` when the question names a metric that a figure of the context carries,
  ``composite`` when it also asks why (*why*, *what drove*, *outlook* … after a *what was* / *how
  much*); a metric named only inside a why-question is ``narrative``. Any other answer is ``narrative``
  when it cites a named source file, else ``policy``: the extractive answer, unchanged.
* **Period and scope** — an explicit fiscal year (``FY2025``, ``2025``) or a relative one (``last
  year``, ``this year``) resolved against the reference date (the fiscal year is the calendar year);
  a scope label of the context's figures (``EMEA``) or a group word (``group``, ``company`` …).
* **Figures** — those of the context with the metric and the stated scope and period whose sentence,
  with its chunk title, holds every other content term of the question: an unreported qualifier
  (``APAC``, ``partner channel``) matches no figure, so the engine refuses instead of answering a
  neighbouring one. Several figures for one scope and period (a superseded version that leaked into
  the context) resolve to the best-ranked chunk's.
* **Clarification** — several scopes or periods with both left open → ``ask_first`` (the reply is a
  clarifying question and states no figure); one of them open → its default (the group; the latest
  year), stated as an assumption → ``answer_with_assumptions``, as is a resolved relative period;
  otherwise ``none``.
* **Refusal** — below the engine's relevance threshold, or a numeric question no figure matches: the
  claim is the refusal token, which states no number.

A figure answer is the sentence that states it followed by its citation, ``[<file> <cell locator>]``;
every named file an answer relies on appears in it that way (RAGSpine's citation_validity looks for
the file name in the answer). Policy chunks have no file name and their answers stay as extracted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from ragspine_pipeline.demo.chunks import Chunk, Figure

REFUSAL = "not in context"
GROUP = "Group"  # the scope a figure question defaults to when it names none
GROUP_WORDS = ("group", "company", "company-wide", "companywide", "consolidated", "overall")
# Words that ask for a figure without qualifying it: they need not appear in the figure's sentence.
FIGURE_WORDS = ("make", "made", "report", "reported", "total", "figure", "number", "value", "amount", "year")

_NARRATIVE = re.compile(r"\b(why|explain\w*|drove|driven|drivers?|reasons?|outlook|risks?|trend)\b")
_VALUE = re.compile(r"\b(what (?:was|is|were|are|will)|how (?:much|many|high|large|big))\b")
_YEAR = re.compile(r"\b(?:fy\s*|fiscal\s+(?:year\s+)?)?((?:19|20)\d{2})(\s*(?:h[12]|q[1-4]))?\b")
_RELATIVE = re.compile(r"\b(last|previous|prior|this|current)\s+(?:fiscal\s+)?year\b")


Located = tuple[Chunk, Figure]  # a figure and the chunk that states it


@dataclass(frozen=True)
class Claim:
    """One claim of the answer's ledger (a trace's ``answer.claims`` entry without its id)."""

    text: str
    citation_id: str
    answer_point: str | None = None
    support_phrases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reply:
    """What the engine answers: the answer text, its claim ledger and the trace's ``outcome``."""

    text: str
    claims: tuple[Claim, ...]
    outcome: dict[str, Any] = field(default_factory=dict)

    def ledger(self) -> list[dict[str, Any]]:
        """The claims as the trace's ``answer.claims`` (ids ``c1``, ``c2`` … in answer order)."""
        return [
            {
                "claim_id": f"c{n}",
                "text": claim.text,
                "citation_id": claim.citation_id,
                "answer_point": claim.answer_point,
                # No phrases: the key is left out, so the claim's word tokens decide its support.
                **({"support_phrases": list(claim.support_phrases)} if claim.support_phrases else {}),
            }
            for n, claim in enumerate(self.claims, 1)
        ]


def reference_day(reference_date: date | str | None, ts: float | str | None) -> date:
    """The day relative periods are resolved against: ``reference_date`` when given, else the day of
    ``ts`` (epoch seconds or ISO 8601), else today (UTC)."""
    if isinstance(reference_date, date):
        return reference_date
    if reference_date:
        return date.fromisoformat(str(reference_date)[:10])
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        return datetime.fromtimestamp(ts, UTC).date()
    if isinstance(ts, str) and len(ts) >= 10:
        try:
            return date.fromisoformat(ts[:10])
        except ValueError:
            pass
    return datetime.now(UTC).date()


def decide(
    question: str,
    context: Sequence[Chunk],
    extracted: Sequence[Claim],
    *,
    reference_date: date,
    terms: Callable[[str], list[str]],
) -> Reply:
    """The reply to ``question`` from the selected ``context`` (rank order) and the claims the engine
    extracted from it (none: the engine refused under its relevance threshold). ``terms`` is the
    engine's tokenizer, so that terms compare as retrieval compares them."""
    text = question.lower()
    figures = [(chunk, figure) for chunk in context for figure in chunk.figures]
    metric = _named_metric(text, figures)
    cue = _NARRATIVE.search(text)
    asks_figure = metric is not None and (cue is None or _VALUE.search(text[: cue.start()]) is not None)
    if not asks_figure:
        if not extracted:
            return _refusal("narrative" if context and context[0].doc else "policy")
        return _extractive(context, extracted)
    route = "composite" if cue else "numeric"
    if not extracted:
        return _refusal(route)
    clause = text[: cue.start()] if cue else text
    return _figure_reply(clause, metric, figures, context, extracted, route, reference_date, terms)


# -- routes ----------------------------------------------------------------------------------------


def _refusal(route: str) -> Reply:
    return Reply(REFUSAL, (), {"route": route, "clarification_mode": "none", "refused": True, "sources": []})


def _extractive(context: Sequence[Chunk], claims: Sequence[Claim]) -> Reply:
    """The extracted sentences as they are, followed by the files they cite (policy chunks: none)."""
    cited = _cited(context, claims)
    named = any(chunk.doc for chunk in cited)
    answer = " ".join(claim.text for claim in claims)
    outcome: dict[str, Any] = {
        "route": "narrative" if named else "policy",
        "clarification_mode": "none",
        "refused": False,
        "sources": [_chunk_source(chunk) for chunk in cited],
    }
    if named:
        outcome["narrative_answer"] = answer
        outcome["retrieved_context"] = [chunk.text for chunk in context]
        answer = _with_citations(answer, [_chunk_source(chunk) for chunk in cited if chunk.doc])
    return Reply(answer, tuple(claims), outcome)


def _figure_reply(
    clause: str,
    metric: str,
    figures: list[Located],
    context: Sequence[Chunk],
    extracted: Sequence[Claim],
    route: str,
    reference_date: date,
    terms: Callable[[str], list[str]],
) -> Reply:
    """The figure the question's clause asks for (composite: with the narrative the engine extracted),
    a clarifying question, or a refusal."""
    period, relative = _period(clause, reference_date)
    scopes = list(dict.fromkeys(figure.scope for _, figure in figures))
    scope = _named_scope(clause, scopes)
    asked = _asked_terms(clause, metric, scopes, terms)
    candidates = [
        (chunk, figure)
        for chunk, figure in figures
        if figure.metric == metric
        and scope in (None, figure.scope)
        and period in (None, figure.period)
        and asked <= set(terms(f"{chunk.title} {chunk.sentences[figure.sentence][0]}"))
    ]
    if not candidates:
        return _refusal(route)
    chosen, assumptions = _resolve(candidates, scope, period)
    if chosen is None:
        return _ask_first(metric, candidates, route)
    if relative:
        assumptions.insert(0, f"{relative} means {period} (reference date {reference_date})")
    chunk, figure = chosen
    sentence, point = chunk.sentences[figure.sentence]
    found = {"doc": figure.doc, "locator": figure.locator}
    answer = _with_citations(sentence, [found])
    claims = [Claim(sentence, chunk.chunk_id, point)]
    outcome: dict[str, Any] = {
        "route": route,
        "clarification_mode": "answer_with_assumptions" if assumptions else "none",
        "refused": False,
        "found_value": figure.value,
        "found_unit": figure.unit,
        "found_source": found,
    }
    if assumptions:
        answer = f"Assuming {' and '.join(assumptions)}: {answer}"
        outcome["assumptions"] = assumptions
    narrative = [claim for claim in extracted if _is_narrative(_chunk_of(context, claim))]
    sources = [found]
    if route == "composite" and narrative:
        told = " ".join(claim.text for claim in narrative)
        cited = [_chunk_source(chunk) for chunk in _cited(context, narrative)]
        answer = f"{answer} {_with_citations(told, cited)}"
        claims += narrative
        sources += cited
        outcome["narrative_answer"] = told
        outcome["retrieved_context"] = [chunk.text for chunk in context]
    outcome["sources"] = sources
    return Reply(answer, tuple(claims), outcome)


def _resolve(
    candidates: list[Located], scope: str | None, period: str | None
) -> tuple[Located | None, list[str]]:
    """``(figure, assumptions made)``; no figure when the question must be clarified first.

    One scope and period among the candidates: the best-ranked one. Several, with both scope and period
    open: clarify. Otherwise the open one takes its default — the group, the latest fiscal year.
    """
    assumptions: list[str] = []
    if len({(figure.scope, figure.period) for _, figure in candidates}) > 1:
        if scope is None and period is None:
            return None, assumptions
        if scope is None:
            if all(figure.scope != GROUP for _, figure in candidates):
                return None, assumptions
            candidates = [(chunk, figure) for chunk, figure in candidates if figure.scope == GROUP]
            assumptions.append(f"you mean the whole {GROUP.lower()}")
        if period is None:
            latest = max((figure.period for _, figure in candidates), key=_year)
            candidates = [(chunk, figure) for chunk, figure in candidates if figure.period == latest]
            assumptions.append(f"you mean the latest fiscal year, {latest}")
    return candidates[0], assumptions


def _ask_first(metric: str, candidates: list[Located], route: str) -> Reply:
    """A clarifying question naming the scopes and periods the context reports the metric for. Its
    ledger states, per chunk and scope, which periods are reported, supported by those very words."""
    scopes = list(dict.fromkeys(figure.scope for _, figure in candidates))
    periods = sorted({figure.period for _, figure in candidates}, key=_year, reverse=True)
    by_chunk: dict[tuple[str, str], tuple[Chunk, list[str]]] = {}
    for chunk, figure in candidates:
        by_chunk.setdefault((chunk.chunk_id, figure.scope), (chunk, []))[1].append(figure.period)
    claims = tuple(
        Claim(
            f"{scope} {metric} is reported for {_listed(found)}.",
            chunk.chunk_id,
            None,
            (metric, scope, *found),
        )
        for (_, scope), (chunk, found) in by_chunk.items()
    )
    cited = list(dict.fromkeys(chunk for chunk, _ in by_chunk.values()))
    question = (
        f"{metric.capitalize()} is reported for {_listed(scopes)}, for {_listed(periods)}: "
        "which scope and fiscal year do you mean?"
    )
    sources = [_chunk_source(chunk) for chunk in cited]
    outcome = {"route": route, "clarification_mode": "ask_first", "refused": False, "sources": sources}
    return Reply(_with_citations(question, sources), claims, outcome)


# -- reading the question --------------------------------------------------------------------------


def _named_metric(text: str, figures: list[Located]) -> str | None:
    """The longest metric of the context's figures that the question names (word-bounded)."""
    metrics = sorted({figure.metric for _, figure in figures}, key=len, reverse=True)
    return next((m for m in metrics if re.search(rf"\b{re.escape(m.lower())}\b", text)), None)


def _named_scope(text: str, scopes: list[str]) -> str | None:
    """The first scope the question names: a scope label, or a group word for the group."""
    for scope in scopes:
        if re.search(rf"\b{re.escape(scope.lower().rstrip('s'))}s?\b", text):
            return scope
    if GROUP in scopes and re.search(rf"\b({'|'.join(map(re.escape, GROUP_WORDS))})\b", text):
        return GROUP
    return None


def _period(text: str, reference_date: date) -> tuple[str | None, str | None]:
    """``(period, relative phrase)``: an explicit year (``FY2025``; a half or quarter is its own
    period, ``2025H1``, which no annual figure matches) or a relative year on ``reference_date``."""
    match = _YEAR.search(text)
    if match:
        year, part = match.group(1), (match.group(2) or "").replace(" ", "").upper()
        return (f"{year}{part}" if part else f"FY{year}"), None
    match = _RELATIVE.search(text)
    if match:
        back = 1 if match.group(1) in ("last", "previous", "prior") else 0
        return f"FY{reference_date.year - back}", match.group(0)
    return None, None


def _asked_terms(clause: str, metric: str, scopes: list[str], terms: Callable[[str], list[str]]) -> set[str]:
    """The question's content terms other than its metric, scope, period and figure words: the
    qualifiers a figure's sentence (or chunk title) must hold to answer it."""
    clause = _RELATIVE.sub(" ", _YEAR.sub(" ", re.sub(r"['’]s\b", "", clause)))
    ignored = " ".join([metric, *scopes, *GROUP_WORDS, *FIGURE_WORDS])
    return set(terms(clause)) - set(terms(ignored))


# -- helpers ---------------------------------------------------------------------------------------


def _year(period: str) -> int:
    digits = re.search(r"\d{4}", period)
    return int(digits.group(0)) if digits else 0


def _listed(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _chunk_of(context: Sequence[Chunk], claim: Claim) -> Chunk:
    return next(chunk for chunk in context if chunk.chunk_id == claim.citation_id)


def _cited(context: Sequence[Chunk], claims: Sequence[Claim]) -> list[Chunk]:
    """The chunks the claims cite, in citation order, each once."""
    return list(dict.fromkeys(_chunk_of(context, claim) for claim in claims))


def _is_narrative(chunk: Chunk) -> bool:
    """A chunk of a named file that states no figure (a memo, an FAQ)."""
    return bool(chunk.doc) and not chunk.figures


def _chunk_source(chunk: Chunk) -> dict[str, str]:
    """``{doc, locator}`` of a chunk: its file and place in it; a policy chunk is its document and id."""
    return {"doc": chunk.doc or chunk.document_id, "locator": chunk.locator or chunk.chunk_id}


def _with_citations(text: str, sources: list[dict[str, str]]) -> str:
    """``text [file loc1; loc2] [other file loc]`` — one bracket per file, in first-cited order."""
    by_doc: dict[str, list[str]] = {}
    for source in sources:
        by_doc.setdefault(source["doc"], []).append(source["locator"])
    tags = [f"[{doc} {'; '.join(dict.fromkeys(locators))}]" for doc, locators in by_doc.items()]
    return " ".join([text, *tags])
