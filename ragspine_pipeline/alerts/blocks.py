"""Alerts as one Slack message: Block Kit blocks and the plain-text fallback (notifications, old clients).

A regression leads with its cause (the first failed stages and the admissibility rules broken, the worst
cases), then one row per metric (a failed gate and a baseline regression of the same metric are one row
with both bars; failed gates first), the failed slices, the runbook line, a button to the Dagster run and,
where reports are served, buttons to the run's report and case explorer. A recovery names what recovered
(``Alert.recovered``): each metric, channel, slice or rate with its value now, the bars it had failed and
what it was, and the run that recovered it.
A production alert gives, per rate and slice, tonight's value with its n, the trailing value with its n
and nights, how much worse, and the p- and q-values — a trailing value is an estimate, never shown as a
threshold. A failed run gives its error, root cause first, and the steps that succeeded before it failed.
A notice (an index version superseded before it was evaluated) is its one sentence, in the title. The
alerts one run raised are one message (:func:`message`): the most severe leads, a notice comes last.

Every text that reaches Slack — the fallback ``text``, every mrkdwn block and the plain-text header — has
Slack's control characters escaped (``&`` ``<`` ``>`` as ``&amp;`` ``&lt;`` ``&gt;``), so an index version,
slice, metric name, question or error holding ``<!channel>``, ``<@U123>`` or ``<http://x|y>`` shows as
text and never pings anyone or links anywhere. Slack's limits are kept (header ≤ 150 characters, section
text ≤ 3000, at most 50 blocks).
"""

from __future__ import annotations

from collections.abc import Sequence

from ragspine_pipeline.alerts.model import Alert, Drop, MetricRow, Recovery
from ragspine_pipeline.decision.baseline import COUNT_METRICS
from ragspine_pipeline.decision.causes import cause_sentence, worst_case_line
from ragspine_pipeline.scoring.drop_results import ReturnTest

TABLE_ROWS = 12
TEXT_ROWS = 3
SLICES_SHOWN = 6
MAX_BLOCKS = 50
SEVERITY = {"run_failure": 0, "regression": 1, "recovered": 2, "accepted": 3, "notice": 4}
STEPS_SHOWN = 12  # a failed run's succeeded steps named
STREAMS = ("release", "extraction", "production")  # within a kind, the release leads


def _stream_kind(alert: Alert) -> str:
    """What a stream evaluates: ``release`` of ``svc/release:golden``, ``production`` of ``production``
    (a service's streams carry its name first)."""
    return alert.stream.rsplit("/", 1)[-1].split(":", 1)[0]


def _lead_order(alert: Alert) -> tuple:
    stream = _stream_kind(alert)
    return (
        SEVERITY[alert.kind],
        STREAMS.index(stream) if stream in STREAMS else len(STREAMS),
        alert.created_at,
    )


# -- one run, one message --------------------------------------------------------------------------


def message(alerts: Sequence[Alert]) -> tuple[str, list[dict]]:
    """The fallback text and blocks of one message covering ``alerts`` (those of one run), the most
    severe first: a failed run, then regressions, then recoveries; the release before the extraction
    channels before production."""
    ordered = sorted(alerts, key=_lead_order)
    lead, rest = ordered[0], ordered[1:]
    text = fallback_text(lead)
    if rest:
        text += " Also: " + "; ".join(_escape(a.title) for a in rest) + "."
    out = [_header(lead.title), *_body(lead)]
    for alert in rest:
        out += [{"type": "divider"}, _section(f"*{_escape(alert.title)}*"), *_body(alert)]
    links = [
        ("Open the run in Dagster", next((a.run_url for a in ordered if a.run_url), None)),
        ("Open the report", next((a.report_url for a in ordered if a.report_url), None)),
        ("Open the case explorer", next((a.explorer_url for a in ordered if a.explorer_url), None)),
    ]
    out = out[: MAX_BLOCKS - 2] + _footer(links, lead)
    return text, out


def fallback_text(alert: Alert) -> str:
    """One line for notifications and clients without Block Kit (escaped like the blocks)."""
    parts = [alert.title]
    if alert.kind == "run_failure":
        where = f" at step {alert.step}" if alert.step else ""
        parts = [f"{alert.title}{where}: {alert.error or 'no error message'}"]
        if alert.succeeded is not None:
            parts[0] += f". {_succeeded_text(alert)}."
    elif alert.kind == "regression":
        parts += [f"Blocked: {problem}." for problem in alert.problems]
        why = cause_sentence(alert.causes) if alert.causes else None
        if why:
            parts.append(f"Why: {why}.")
        rows = alert.metric_rows()
        if rows:
            shown = "; ".join(_row_text(row) for row in rows[:TEXT_ROWS])
            parts.append(shown + _more(len(rows), TEXT_ROWS, "metric") + ".")
        slices = alert.failed_slices
        if slices:
            parts.append(f"{len(slices)} failed slice{'s' if len(slices) > 1 else ''}.")
        if alert.drops:
            shown = "; ".join(_drop_text(d) for d in alert.drops[:TEXT_ROWS])
            parts.append(shown + _more(len(alert.drops), TEXT_ROWS, "drop") + ".")
        elif alert.returns:
            shown = "; ".join(_return_text(r) for r in alert.returns[:TEXT_ROWS])
            parts.append(shown + _more(len(alert.returns), TEXT_ROWS, "rate") + ".")
    elif alert.kind == "accepted" and alert.accepted is not None:
        parts.append(f"{alert.accepted.reason}.")
    elif alert.kind == "recovered":
        if alert.run_id:
            parts = [f"{alert.title} (run {alert.run_id})"]
        if alert.recovered:
            shown = "; ".join(_recovery_text(r) for r in alert.recovered[:TEXT_ROWS])
            parts.append(shown + _more(len(alert.recovered), TEXT_ROWS, "item") + ".")
    if alert.runbook and alert.kind != "recovered":
        parts.append(f"Runbook: {alert.runbook}")
    return _escape(" ".join(" ".join(parts).split()))


def blocks(alert: Alert) -> list[dict]:
    """The Block Kit message of one alert on its own."""
    return message([alert])[1]


# -- the body of one alert -------------------------------------------------------------------------


def _body(alert: Alert) -> list[dict]:
    if alert.kind == "run_failure":
        out = [
            _fields({"Job": alert.job, "Step": alert.step or "—", "Run": alert.run_id}),
            _section(f"```{_escape(_clip(alert.error or 'no error message', 2500))}```"),
        ]
        if alert.succeeded is not None:
            out.append(_section(_escape(_succeeded_text(alert))))
    elif alert.kind == "notice":
        out = [_fields(_where(alert)), _section(NOTICE_WHY)]
    elif alert.kind == "accepted":
        out = [_section(_accepted_text(alert))]
    elif alert.kind == "recovered":
        out = [_fields(_where(alert)), _section(_recovered_text(alert))]
    else:
        out = _regression_blocks(alert)
    if alert.runbook and alert.kind != "recovered":
        out.append(_section(f"*Runbook*: {_escape(_clip(alert.runbook, 2800))}"))
    return out


def _accepted_text(alert: Alert) -> str:
    """Who accepted which rates' new level, when and why, and what that changes."""
    accepted = alert.accepted
    if accepted is None:
        return _escape(alert.title)
    why = _escape(_clip(accepted.reason, 500))
    return (
        f"*Accepted by* {_escape(accepted.by)} on {_escape(accepted.at[:10])}: {why}\n"
        + ("The incident is closed. " if accepted.closes else "")
        + "From now on these rates are compared with the nights since they dropped."
    )


# Why an index version goes unevaluated (defs.automation.rebuild_tick): said under a superseded notice.
NOTICE_WHY = (
    "Only the live index can be replayed: a version published and replaced between two reads of the "
    "index manifest (`RAGSPINE_REBUILD_SENSOR_INTERVAL_S`) is never evaluated."
)


def _succeeded_text(alert: Alert) -> str:
    """A failed run's steps that succeeded, said whether there were any (when they are known)."""
    if not alert.succeeded:
        return "No step succeeded before the failure"
    shown = ", ".join(alert.succeeded[:STEPS_SHOWN])
    return f"Succeeded before the failure: {shown}{_more(len(alert.succeeded), STEPS_SHOWN, 'step')}"


def _recovered_text(alert: Alert) -> str:
    holds = {
        "production": "No production rate is significantly worse than its trailing nights any more.",
        "run": "A retry of the failed run succeeded: the failure above no longer stands.",
    }.get(_stream_kind(alert), "Every gate, slice and baselined metric holds again.")
    if not alert.recovered:
        return holds
    shown = "\n".join(f"• {_escape(_recovery_text(r))}" for r in alert.recovered[:TABLE_ROWS])
    more = _escape(_more(len(alert.recovered), TABLE_ROWS, "item", prose=True))
    return f"*Recovered*\n{shown}{more}\n{holds}"


def _where(alert: Alert) -> dict[str, str | None]:
    fields = {"Index version": alert.index_version, "Golden set": alert.golden_version, "Run": alert.run_id}
    return {name: value for name, value in fields.items() if value or name == "Run"}


def _regression_blocks(alert: Alert) -> list[dict]:
    out: list[dict] = [_section(f"*Blocked*: {_escape(problem)}") for problem in alert.problems]
    causes = alert.causes or {}
    why = cause_sentence(causes) if causes else None
    if why:
        out.append(_section(f"*Why*: {_escape(why)}"))
    worst = [worst_case_line(case) for case in causes.get("worst_cases") or []]
    if worst:
        out.append(_section("*Worst cases*\n" + "\n".join(f"• {_escape(line)}" for line in worst)))
    rows, slices = alert.metric_rows(), alert.failed_slices
    failed = [
        f"{len(rows)} metric{'s' if len(rows) != 1 else ''}" if rows else None,
        f"{len(slices)} slice{'s' if len(slices) != 1 else ''}" if slices else None,
        f"{len(alert.drops)} rate{'s' if len(alert.drops) != 1 else ''}" if alert.drops else None,
    ]
    out.append(_fields({**_where(alert), "Failed": ", ".join(f for f in failed if f) or "—"}))
    if rows:
        out.append(_section(f"*{_rows_label(rows)}*\n" + _metric_table(rows)))
    if slices:
        shown = ", ".join(f"`{_escape(s.name)}` {s.value:.3f} (n={s.n})" for s in slices[:SLICES_SHOWN])
        more = _more(len(slices), SLICES_SHOWN, "slice")
        out.append(_section(f"*Failed slices* (need ≥ {slices[0].reference:g}): {shown}{more}"))
    if alert.drops:
        out.append(_section("*Significant drops*\n" + _drop_table(alert.drops)))
    elif alert.returns:
        out.append(_section("*Still below the level it dropped from*\n" + _return_table(alert.returns)))
    return out


def _rows_label(rows: list[MetricRow]) -> str:
    return "Channels below their thresholds" if all(r.kind == "channel" for r in rows) else "Failed metrics"


def _metric_table(rows: list[MetricRow]) -> str:
    table = [("metric", "value", "gate", "baseline")]
    for row in rows[:TABLE_ROWS]:
        table.append(
            (
                row.name,
                _number(row.name, row.value) + (f" ({row.counts[0]}/{row.counts[1]})" if row.counts else ""),
                _bar(row.name, row.gate) if row.held is None else f"{_bar(row.name, row.held)} holds",
                _bar(row.name, row.baseline),
            )
        )
    return _code(table) + _more(len(rows), TABLE_ROWS, "metric", prose=True)


def _drop_table(drops: list[Drop]) -> str:
    table = [("rate @ slice", "tonight (n)", "trailing (n, nights)", "worse by", "p", "q")]
    for d in drops[:TABLE_ROWS]:
        tonight = f"{d.current:.4f} ({d.current_n})" + (f" over {d.nights} nights" if d.nights > 1 else "")
        table.append(
            (
                f"{d.metric} @ {d.slice}",
                tonight,
                f"{d.trailing:.4f} ({d.trailing_n}, {d.trailing_days})",
                f"{100 * d.worse_by:.1f} pts",
                _p(d.p_value),
                _p(d.q_value),
            )
        )
    notes = [f"{d.metric} @ {d.slice}: {d.note}" for d in drops[:TABLE_ROWS] if d.note]
    return (
        _code(table)
        + "".join(f"\n{_escape(note)}" for note in notes)
        + _more(len(drops), TABLE_ROWS, "drop", prose=True)
    )


def _return_table(returns: list[ReturnTest]) -> str:
    table = [("rate @ slice", "now", "level it dropped from", "since", "worse by")]
    for r in returns[:TABLE_ROWS]:
        now = (
            "no traffic"
            if r.current is None
            else f"{r.current:.4f}" + (f" over {r.nights} nights" if r.nights > 1 else "")
        )
        worse = "" if r.worse_by is None else f"{100 * r.worse_by:.1f} pts"
        table.append((f"{r.metric} @ {r.slice}", now, f"{r.trailing:.4f}", r.since, worse))
    return _code(table) + _more(len(returns), TABLE_ROWS, "rate", prose=True)


def _return_text(r: ReturnTest) -> str:
    now = "no traffic" if r.current is None else f"{r.current:.4f}"
    return f"{r.metric} @ {r.slice} {now} against {r.trailing:.4f} before {r.since}"


def _code(table: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]
    return "```" + _escape(_clip("\n".join(lines), 2500)) + "```"


# -- text pieces -----------------------------------------------------------------------------------


def _row_text(row: MetricRow) -> str:
    bars = []
    if row.gate:
        bars.append(f"needs {_bar(row.name, row.gate)}")
    if row.held:
        bars.append(f"gate {_bar(row.name, row.held)} holds")
    if row.baseline:
        bars.append(f"baseline {_bar(row.name, row.baseline)}")
    return f"{row.name} {_number(row.name, row.value)} ({'; '.join(bars)})"


def _recovery_text(row: Recovery) -> str:
    """One thing that recovered, as plain text: its value now, the bars it had failed, what it was."""
    name = {"slice": f"slice {row.name}", "rate": row.name.replace("@", " @ ", 1)}.get(row.kind, row.name)
    now = "holds again" if row.now is None else f"{_number(row.name, row.now)} now"
    said = [f"needs {_bar(row.name, row.gate)}"] if row.gate else []
    if row.baseline:
        said.append(f"baseline {_bar(row.name, row.baseline)}")
    if row.trailing is not None:
        said.append(f"trailing {row.trailing:.4f} when it dropped")
    was = f"was {_number(row.name, row.was)}" + (f" ({row.counts[0]}/{row.counts[1]})" if row.counts else "")
    said.append(was + (f", n={row.n}" if row.n is not None else ""))
    return f"{name} {now} ({'; '.join(said)})"


def _drop_text(d: Drop) -> str:
    window = "tonight" if d.nights == 1 else f"last {d.nights} nights"
    return (
        f"{d.metric} @ {d.slice} {d.current:.4f} ({window}, n={d.current_n}) vs {d.trailing:.4f} over "
        f"{d.trailing_days} trailing nights (n={d.trailing_n}): {100 * d.worse_by:.1f} points worse, "
        f"p {_p(d.p_value)}, q {_p(d.q_value)}" + (f" ({d.note})" if d.note else "")
    )


def _more(total: int, shown: int, what: str, prose: bool = False) -> str:
    """The one wording of "and N more" for every list, so the counts agree everywhere."""
    if total <= shown:
        return ""
    rest = total - shown
    noun = f"{what}{'s' if rest > 1 else ''}"
    return f"\n… and {rest} more {noun}" if prose else f" (+{rest} more {noun})"


def _bar(name: str, bar: tuple[str, float] | None) -> str:
    return "—" if bar is None else f"{bar[0]} {_number(name, bar[1])}"


def _number(name: str, value: float) -> str:
    """Rates with 4 decimals; counts (the fabrication count) as whole numbers."""
    if name in COUNT_METRICS and float(value).is_integer():
        return str(int(value))
    return f"{value:.4f}"


def _p(value: float) -> str:
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


# -- blocks ----------------------------------------------------------------------------------------


def _header(title: str) -> dict:
    # Slack does not parse mentions in plain_text, but clients differ: it is escaped like the rest.
    return {"type": "header", "text": {"type": "plain_text", "text": _clip(_escape(title), 150)}}


def _footer(links: list[tuple[str, str | None]], lead: Alert) -> list[dict]:
    out = []
    buttons = [
        {"type": "button", "text": {"type": "plain_text", "text": text}, "url": link}
        for text, link in links
        if link
    ]
    if buttons:
        out.append({"type": "actions", "elements": buttons})
    out.append(
        {
            "type": "context",
            "elements": [
                {"type": "mrkdwn", "text": _escape(f"ragspine-pipeline · {lead.created_at} · {lead.id}")}
            ],
        }
    )
    return out


def _fields(values: dict[str, str | None]) -> dict:
    return {
        "type": "section",
        "fields": [
            {"type": "mrkdwn", "text": f"*{name}*\n{_escape(_clip(value or '—', 1900))}"}
            for name, value in list(values.items())[:10]
        ],
    }


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, 3000)}}


def _escape(text: str) -> str:
    """Slack's mrkdwn control characters (``&``, ``<``, ``>``) as entities: no ``<!channel>``, no links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
