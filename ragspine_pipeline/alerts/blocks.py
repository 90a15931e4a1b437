"""An alert as a Slack message: Block Kit blocks and the plain-text fallback (notifications, old clients).

Header, a few fields (index, golden set, run, what failed), a compact monospace table of the worst
regressions (Block Kit has no table that every client renders), the failed slices, and a button to
the Dagster run. Slack's limits are respected: header ≤ 150 characters, section text ≤ 3000.
"""

from __future__ import annotations

from collections import Counter

from ragspine_pipeline.alerts.model import Alert, Finding

TABLE_ROWS = 8
COUNTS = frozenset({"fabrication", "fabrication_count"})  # findings that count answers, not rates
SLICES_SHOWN = 6
_KIND_LABEL = {"gate": "gate", "baseline": "baseline", "channel": "channel", "slice": "slice"}


def fallback_text(alert: Alert) -> str:
    """One line for notifications and clients without Block Kit."""
    if alert.kind == "run_failure":
        where = f" at step {alert.step}" if alert.step else ""
        return f"{alert.title}{where}: {alert.error or 'no error message'}"
    if alert.kind == "recovered":
        return alert.title
    worst = alert.worst_first()
    shown = "; ".join(_finding_text(f) for f in worst[:3])
    more = f" (+{len(worst) - 3} more)" if len(worst) > 3 else ""
    return f"{alert.title}: {shown}{more}"


def blocks(alert: Alert) -> list[dict]:
    """The Block Kit message of ``alert``."""
    out: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": _clip(alert.title, 150)}}]
    if alert.kind == "run_failure":
        out.append(_fields({"Job": alert.job, "Step": alert.step or "—", "Run": alert.run_id}))
        out.append(_section(f"```{_escape(_clip(alert.error or 'no error message', 2500))}```"))
    elif alert.kind == "recovered":
        out.append(
            _fields(
                {
                    "Index version": alert.index_version,
                    "Golden set": alert.golden_version,
                    "Run": alert.run_id,
                }
            )
        )
        out.append(_section("Every gate, slice and baselined metric holds again."))
    else:
        out.extend(_regression_blocks(alert))
    if alert.run_url:
        out.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open the run in Dagster"},
                        "url": alert.run_url,
                    }
                ],
            }
        )
    out.append(
        {
            "type": "context",
            "elements": [
                {"type": "mrkdwn", "text": _escape(f"ragspine-pipeline · {alert.created_at} · {alert.id}")}
            ],
        }
    )
    return out


def _regression_blocks(alert: Alert) -> list[dict]:
    counts = Counter(f.kind for f in alert.findings)
    failed = ", ".join(f"{n} {_KIND_LABEL[kind]}{'s' if n > 1 else ''}" for kind, n in sorted(counts.items()))
    out = [
        _fields(
            {
                "Index version": alert.index_version,
                "Golden set": alert.golden_version,
                "Run": alert.run_id,
                "Failed": failed or "—",
            }
        )
    ]
    named = [f"`{_escape(f.name)}`" for f in alert.findings if f.kind in ("gate", "channel")]
    if named:
        label = "Failed gates" if any(f.kind == "gate" for f in alert.findings) else "Failed channels"
        out.append(_section(f"*{label}*: {', '.join(named)}"))
    worst = [f for f in alert.worst_first() if f.kind != "slice"]
    if worst:
        out.append(_section("*Worst regressions*\n" + _table(worst[:TABLE_ROWS], len(worst))))
    slices = [f for f in alert.worst_first() if f.kind == "slice"]
    if slices:
        shown = ", ".join(f"`{_escape(s.name)}` {s.value:.3f} (n={s.n})" for s in slices[:SLICES_SHOWN])
        more = f" and {len(slices) - SLICES_SHOWN} more" if len(slices) > SLICES_SHOWN else ""
        bar = slices[0].reference
        out.append(_section(f"*Failed slices* (need ≥ {bar:g}): {shown}{more}"))
    return out


def _table(findings: list[Finding], total: int) -> str:
    rows = [("what", "value", "needs", "delta")]
    for f in findings:
        bar = f"{f.op} {_number(f, f.reference)}" + (" (baseline)" if f.reference_kind == "baseline" else "")
        rows.append((f"{f.kind} {f.name}", _number(f, f.value), bar, _number(f, f.delta, signed=True)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    more = f"\n… and {total - len(findings)} more" if total > len(findings) else ""
    return "```" + _escape(_clip("\n".join(lines), 2500)) + "```" + more


def _finding_text(f: Finding) -> str:
    versus = "baseline" if f.reference_kind == "baseline" else "needs"
    return f"{f.name} {_number(f, f.value)} ({versus} {f.op} {_number(f, f.reference)})"


def _number(f: Finding, value: float, signed: bool = False) -> str:
    """Rates with 4 decimals; counts (the fabrication count) as whole numbers."""
    sign = "+" if signed else ""
    if f.name in COUNTS and float(value).is_integer():
        return f"{int(value):{sign}d}"
    return f"{value:{sign}.4f}"


def _fields(values: dict[str, str | None]) -> dict:
    return {
        "type": "section",
        "fields": [
            {"type": "mrkdwn", "text": f"*{name}*\n{_escape(value or '—')}"} for name, value in values.items()
        ],
    }


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, 3000)}}


def _escape(text: str) -> str:
    """Slack's mrkdwn control characters (``&``, ``<``, ``>``) as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
