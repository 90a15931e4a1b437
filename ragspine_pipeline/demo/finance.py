"""Demo content as data: Kestrel's finance knowledge base and the RAGSpine-style golden cases on it.

* :data:`FINANCE_DOCUMENTS` — named source files (a results deck, a finance FAQ, an outlook memo, and
  two documents the engine must not read: the superseded preliminary deck and a restricted budget draft).
  Each chunk has a ``locator`` inside its file (a table row of a slide, a section of a memo); each
  sentence states one answer point and, in a deck or a budget sheet, one figure with the locator of its
  cell. Figure sentences name their metric, scope and period literally, so a clarifying question can be
  checked against the chunk text.
* :func:`finance_chunk_rows` — the chunks as ``corpus.jsonl`` rows: the policy rows' keys plus ``doc``
  (the file name), ``locator`` and ``figures`` (``{metric, scope, period, value, unit, doc, locator,
  sentence}``, ``sentence`` being the index of the sentence that states the figure).
* :data:`FINANCE_CASES` — golden cases in the RAGSpine dialect (``case_type``, ``expected``,
  ``reference_date``) that also carry the layered fields (``answerable``, ``required_source_ids``,
  ``required_points``), so that the grounded, layered and QA-gate metrics all apply to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WORKFLOW = "finance-reporting"
REFERENCE_DATE = "2026-11-02"  # the day the golden finance questions are asked

RESULTS_DECK = "Kestrel_FY2025_Results.pptx"
BUDGET_DRAFT = "Kestrel_FY2026_Budget_Draft.xlsx"
FINANCE_FAQ = "Kestrel_Finance_FAQ.docx"
OUTLOOK_MEMO = "Kestrel_FY2026_Outlook_Memo.docx"


@dataclass(frozen=True)
class Line:
    """One sentence, the answer point it states and, when it states a figure, the figure and its cell:
    ``(metric, scope, period, value, unit, cell locator)``."""

    sentence: str
    point: str
    figure: tuple[str, str, str, float, str, str] | None = None


@dataclass(frozen=True)
class Part:
    """One chunk: where it sits in its file, its heading and its lines."""

    locator: str
    heading: str
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class FinanceDocument:
    document_id: str
    doc: str  # the file name, which answers cite
    title: str
    version: str
    parts: tuple[Part, ...]
    permitted: bool = True
    current: bool = True


def _results_row(slide: int, row: int, scope: str, metric: str, unit: str, fy2025: float, fy2024: float):
    """A results-table row: the FY2025 figure in column 3, the FY2024 one in column 2."""
    locator = f"slide={slide},table=1,row={row}"
    subject = f"Kestrel {scope} {metric}" if scope == "Group" else f"{scope} {metric}"
    shown = "%" if unit == "%" else " USD million"
    lines = tuple(
        Line(
            f"{subject} was {value:.1f}{shown} in {period}.",
            f"{scope.lower()} {metric} {period} {value:.1f}",
            (metric, scope, period, value, unit, f"{locator},col={col}"),
        )
        for period, value, col in (("FY2025", fy2025, 3), ("FY2024", fy2024, 2))
    )
    return Part(locator, f"{scope} {metric}", lines)


def _section(number: int, heading: str, *lines: tuple[str, str]) -> Part:
    return Part(f"section={number}", heading, tuple(Line(sentence, point) for sentence, point in lines))


# fmt: off
FINANCE_DOCUMENTS: tuple[FinanceDocument, ...] = (
    FinanceDocument(
        "fy2025-results", RESULTS_DECK, "Kestrel FY2025 full-year results", "v2",
        (
            _results_row(3, 2, "Group", "revenue", "USD_M", 412.6, 368.2),
            _results_row(3, 3, "Group", "gross margin", "%", 73.1, 71.4),
            _results_row(3, 4, "Group", "operating income", "USD_M", 55.3, 41.0),
            _results_row(5, 2, "EMEA", "revenue", "USD_M", 151.3, 133.9),
            _results_row(5, 3, "Americas", "revenue", "USD_M", 214.8, 196.5),
        ),
    ),
    FinanceDocument(
        "finance-faq", FINANCE_FAQ, "Finance reporting FAQ", "v1",
        (
            _section(1, "Fiscal year",
                     ("Kestrel's fiscal year follows the calendar year, from January 1 to December 31.",
                      "fiscal year is the calendar year")),
            _section(2, "Units",
                     ("Amounts in the results deck are in US dollars, in millions, and margins are in "
                      "percent of revenue.", "amounts in USD million, margins in percent")),
            _section(3, "Regions",
                     ("Revenue is reported for the group and for two regions, EMEA and the Americas.",
                      "revenue reported for group, EMEA and Americas"),
                     ("Other regions, such as APAC, are not reported separately.", "APAC not reported")),
        ),
    ),
    FinanceDocument(
        "fy2026-outlook", OUTLOOK_MEMO, "FY2026 outlook memo", "v1",
        (
            _section(1, "EMEA growth",
                     ("EMEA revenue growth in FY2025 was driven by three large banks in Germany and the "
                      "Nordics that moved their incident tooling to Kestrel.",
                      "EMEA growth driven by German and Nordic banks"),
                     ("The new Frankfurt hosting region also helped, because regulated buyers can now host "
                      "in Germany.", "Frankfurt region helped EMEA")),
            _section(2, "Gross margin",
                     ("The group gross margin improved in FY2025 because hosting costs fell after the move "
                      "to reserved cloud capacity.", "margin improved as hosting costs fell")),
            _section(3, "Outlook",
                     ("For FY2026, management expects growth to slow in the Americas while EMEA keeps "
                      "expanding.", "growth slows in Americas, EMEA expands"),
                     ("Hiring stays flat until the second half of FY2026.", "hiring flat until second half")),
            _section(4, "Risks",
                     ("The main risks for FY2026 are currency swings against the euro and longer enterprise "
                      "sales cycles.", "risks: currency swings and longer sales cycles")),
        ),
    ),
    # Superseded: the preliminary deck, before EMEA revenue was restated.
    FinanceDocument(
        "fy2025-results", RESULTS_DECK, "Kestrel FY2025 full-year results", "v1",
        (
            Part("slide=5,table=1,row=2", "EMEA revenue",
                 (Line("EMEA revenue was 149.8 USD million in FY2025.", "emea revenue FY2025 149.8",
                       ("revenue", "EMEA", "FY2025", 149.8, "USD_M", "slide=5,table=1,row=2,col=3")),)),
        ),
        current=False,
    ),
    # Restricted: the draft budget is visible to the finance team only.
    FinanceDocument(
        "fy2026-budget-draft", BUDGET_DRAFT, "Kestrel FY2026 budget draft", "v1",
        (
            Part("sheet=Plan,rows=4-5", "Revenue plan",
                 (Line("Kestrel Group revenue is planned at 468.0 USD million in FY2026.",
                       "group revenue plan FY2026",
                       ("revenue", "Group", "FY2026", 468.0, "USD_M", "sheet=Plan,cell=C4")),
                  Line("EMEA revenue is planned at 176.0 USD million in FY2026.", "emea revenue plan FY2026",
                       ("revenue", "EMEA", "FY2026", 176.0, "USD_M", "sheet=Plan,cell=C5")))),
        ),
        permitted=False,
    ),
)
# fmt: on

_FIGURE_KEYS = ("metric", "scope", "period", "value", "unit", "locator")


def finance_chunk_rows() -> list[dict[str, Any]]:
    """The finance documents as ``corpus.jsonl`` rows (see the module docstring)."""
    rows = []
    for doc in FINANCE_DOCUMENTS:
        prefix = doc.document_id if doc.current else f"{doc.document_id}@{doc.version}"
        for n, part in enumerate(doc.parts, 1):
            figures = [
                {**dict(zip(_FIGURE_KEYS, line.figure, strict=True)), "doc": doc.doc, "sentence": i}
                for i, line in enumerate(part.lines)
                if line.figure is not None
            ]
            rows.append(
                {
                    "chunk_id": f"{prefix}#{n}",
                    "document_id": doc.document_id,
                    "parent_id": f"{doc.document_id}/{part.locator}",
                    "version": doc.version,
                    "permitted": doc.permitted,
                    "current": doc.current,
                    "title": f"{doc.title} — {part.heading}",
                    "text": " ".join(line.sentence for line in part.lines),
                    "points": [{"sentence": line.sentence, "point": line.point} for line in part.lines],
                    "workflow": WORKFLOW,
                    "doc": doc.doc,
                    "locator": part.locator,
                    "figures": figures,
                }
            )
    return rows


def _fin(
    case_id: str,
    case_type: str,
    qtype: str,
    difficulty: str,
    question: str,
    expected: dict[str, Any],
    sources=(),
    points=(),
) -> dict:
    """A RAGSpine case with layered fields; ``expected`` lists only what differs from a plain answer
    (no clarification, no refusal)."""
    expected = {"clarification": "none", "refuse": False, **expected}
    return {
        "case_id": case_id,
        "question": question,
        "answerable": not expected["refuse"],
        "required_source_ids": list(sources),
        "required_points": list(points),
        "tags": {"workflow": WORKFLOW, "difficulty": difficulty, "qtype": qtype},
        "case_type": case_type,
        "expected": expected,
        "reference_date": REFERENCE_DATE,
    }


def _figure(value: float, unit: str, locator: str) -> dict[str, Any]:
    """What a case expects of a figure answer: value, unit and the results-deck cell it comes from."""
    return {"value": value, "unit": unit, "source": {"doc": RESULTS_DECK, "locator": locator}}


_REFUSE = {"refuse": True}

# fmt: off
FINANCE_CASES: tuple[dict, ...] = (
    _fin("FIN-01", "numeric", "exact_figure", "easy", "What was Kestrel Group revenue in FY2025?",
         _figure(412.6, "USD_M", "slide=3,table=1,row=2,col=3"),
         ["fy2025-results#1"], ["group revenue FY2025 412.6"]),
    _fin("FIN-02", "numeric", "exact_figure", "easy", "What was EMEA revenue in FY2024?",
         _figure(133.9, "USD_M", "slide=5,table=1,row=2,col=2"),
         ["fy2025-results#4"], ["emea revenue FY2024 133.9"]),
    _fin("FIN-03", "numeric", "percent_unit", "easy", "What was the group gross margin in FY2025?",
         _figure(73.1, "%", "slide=3,table=1,row=3,col=3"),
         ["fy2025-results#2"], ["group gross margin FY2025 73.1"]),
    _fin("FIN-04", "numeric", "phrasing", "hard",
         "How much operating income did Kestrel Group report for FY2024?",
         _figure(41.0, "USD_M", "slide=3,table=1,row=4,col=2"),
         ["fy2025-results#3"], ["group operating income FY2024 41.0"]),
    _fin("FIN-05", "numeric", "exact_figure", "easy", "What was Americas revenue in FY2025?",
         _figure(214.8, "USD_M", "slide=5,table=1,row=3,col=3"),
         ["fy2025-results#5"], ["americas revenue FY2025 214.8"]),
    # The superseded preliminary deck states 149.8 for the same cell.
    _fin("FIN-06", "numeric", "restated_figure", "hard", "What was EMEA revenue in FY2025?",
         _figure(151.3, "USD_M", "slide=5,table=1,row=2,col=3"),
         ["fy2025-results#4"], ["emea revenue FY2025 151.3"]),
    # Revenue exists for three scopes and two years: ask which one is meant.
    _fin("FIN-07", "clarification", "should_clarify", "hard", "What was our revenue?",
         {"clarification": "ask_first"},
         ["fy2025-results#1", "fy2025-results#4", "fy2025-results#5"]),
    # "Last year" on the reference date is FY2025 (the fiscal year is the calendar year).
    _fin("FIN-08", "clarification", "relative_period", "hard", "What was EMEA revenue last year?",
         {"clarification": "answer_with_assumptions",
          **_figure(151.3, "USD_M", "slide=5,table=1,row=2,col=3")},
         ["fy2025-results#4"], ["emea revenue FY2025 151.3"]),
    # In-domain but unanswerable: a region, a plan year and a breakdown nothing the engine may read reports
    # (the FY2026 plan is in the restricted budget draft).
    _fin("FIN-09", "refusal", "unreported_scope", "hard", "What was Kestrel's APAC revenue in FY2025?",
         _REFUSE),
    _fin("FIN-10", "refusal", "restricted_figure", "hard", "What will Kestrel Group revenue be in FY2026?",
         _REFUSE),
    _fin("FIN-11", "refusal", "unreported_breakdown", "easy", "What was EMEA operating income in FY2025?",
         _REFUSE),
    _fin("FIN-12", "narrative", "narrative", "easy", "What drove EMEA revenue growth in FY2025?",
         {"narrative_doc": OUTLOOK_MEMO},
         ["fy2026-outlook#1"], ["EMEA growth driven by German and Nordic banks"]),
    _fin("FIN-13", "narrative", "narrative", "easy", "What are the main risks in the FY2026 outlook?",
         {"narrative_doc": OUTLOOK_MEMO},
         ["fy2026-outlook#4"], ["risks: currency swings and longer sales cycles"]),
    _fin("FIN-14", "composite", "composite", "hard",
         "What was EMEA revenue in FY2025, and what drove its growth?",
         {**_figure(151.3, "USD_M", "slide=5,table=1,row=2,col=3"), "narrative_doc": OUTLOOK_MEMO},
         ["fy2025-results#4", "fy2026-outlook#1"],
         ["emea revenue FY2025 151.3", "EMEA growth driven by German and Nordic banks"]),
    _fin("FIN-15", "composite", "composite", "hard",
         "What was the group gross margin in FY2025, and why did it improve?",
         {**_figure(73.1, "%", "slide=3,table=1,row=3,col=3"), "narrative_doc": OUTLOOK_MEMO},
         ["fy2025-results#2", "fy2026-outlook#2"],
         ["group gross margin FY2025 73.1", "margin improved as hosting costs fell"]),
)
# fmt: on
