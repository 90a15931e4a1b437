"""The first section of every report, "What failed": each failure the report shows, whatever the verdict.

:func:`failures` lists them as plain data, those that block the release first — index integrity problems,
failed hard gates, gates that could not be measured, failed slices, baseline regressions — then those
that do not: soft gates below their threshold, extraction channels below theirs, the latest production
night's drop alerts and a failed LLM-judge step. The HTML page (:func:`failed_section`) and the Markdown
report (:mod:`reports.slice_report`) render the same list and the same :func:`verdict`, so neither can
say that everything holds while a section further down shows a failure.

The release decision (``release``) is the authority on gates, slices and regressions; a report written
without one falls back to its own ``gates`` rows. Texts are plain here and escaped where they are used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragspine_pipeline.pages import CASE_EXPLORER_PAGE
from ragspine_pipeline.reports.charts import esc, finite
from ragspine_pipeline.reports.html_gates import gate_delta
from ragspine_pipeline.reports.html_parts import (
    count,
    fixed,
    gate_figure,
    gate_status,
    interval,
    mapping,
    needs,
    pair,
    pct,
    section,
    signed,
)
from ragspine_pipeline.reports.html_qa import channel_checks
from ragspine_pipeline.reports.slice_gate import SliceGate, slice_status
from ragspine_pipeline.reports.why import why_html


@dataclass(frozen=True)
class Failure:
    """One failure as a reader sees it: ``what``, ``name`` in bold (when there is one), then ``detail``;
    e.g. "gate **precision** = 0.7100, needs ≥ 0.8000 (Δ -0.0900)" is ``what`` "gate", ``name``
    "precision" and ``detail`` " = 0.7100, needs ≥ 0.8000 (Δ -0.0900)".

    ``blocks``: it blocks the release; ``section``: the id of the report section with its details
    ("" when no section has more to say).
    """

    what: str
    name: str
    detail: str
    blocks: bool
    section: str = ""


def failures(
    report: Mapping,
    gate: SliceGate,
    *,
    extraction: Mapping | None = None,
    judge: Mapping | None = None,
    production: Sequence[Mapping] = (),
) -> list[Failure]:
    """Every failure of the report and of the extraction, judge and production results shown with it,
    blocking ones first, each group in the order of the sections below."""
    release = mapping(report.get("release"))
    found = [
        Failure("integrity problem", str(p.get("reason")), f": {p.get('detail')}", True)
        for p in map(mapping, release.get("integrity") or [])
    ]
    hard, soft = _failed_gates(report, release)
    found += [Failure("gate", str(g.get("metric")), _gate_detail(g), True, "gates") for g in hard]
    unmeasured = [mapping(g) for g in release.get("unmeasured_gates") or []]
    found += [Failure("gate", str(g.get("metric")), _unmeasured(g), _hard(g), "gates") for g in unmeasured]
    found += [
        Failure("slice", f"{s.get('dimension')}={s.get('value')}", _slice_detail(s), True, "slices")
        for s in _failed_slices(report, release, gate)
    ]
    found += [
        Failure("baseline regression", str(r.get("metric")), _regression_detail(r), True, "gates")
        for r in map(mapping, release.get("regressions") or [])
    ]
    found += [Failure("soft gate", str(g.get("metric")), _gate_detail(g), False, "gates") for g in soft]
    if extraction is not None:
        found += _extraction_failures(extraction)
    if production:
        found += _drops(mapping(production[-1]))
    if judge is not None and judge.get("failed"):
        found.append(Failure("LLM judge step", "", f"failed: {judge['failed']}", False, "judge"))
    return sorted(found, key=lambda f: not f.blocks)  # stable: the section order within each group


def held(report: Mapping, gate: SliceGate, extraction: Mapping | None = None) -> list[str]:
    """What was checked and holds, counted: ``17 gates``, ``9 slices``, ``3 extraction channels`` (a gate
    that does not apply, a slice too small to gate and a channel not checked are not counted)."""
    gates = [g for g in map(mapping, report.get("gates") or []) if gate_status(g) == "pass"]
    release = mapping(report.get("release"))
    slices = sum(
        slice_status(str(dimension), str(value), mapping(entry), gate, release) == "pass"
        for dimension, values in mapping(report.get("slices")).items()
        for value, entry in mapping(values).items()
    )
    parts = [_counted(len(gates), "gate")]
    if slices:
        parts.append(_counted(slices, "slice"))
    if extraction is not None and extraction.get("baseline") is not None:
        channels = {str(k): mapping(v) for k, v in mapping(extraction.get("channels")).items()}
        checks = channel_checks(channels, mapping(extraction.get("baseline")))
        parts.append(_counted(sum(c[0] == "pass" for c in checks.values()), "extraction channel"))
    return parts


def verdict(decision: str | None, found: Sequence[Failure], holding: Sequence[str]) -> str:
    """The one sentence under the title, naming what failed by kind (``2 gates and 1 slice``). It says
    that nothing failed only when nothing in ``found`` did, and a release that ships beside failures
    says which."""
    blocking = [f for f in found if f.blocks]
    other = [f for f in found if not f.blocks]
    also = f" Also failed, without blocking it: {_tally(other)}." if other else ""
    if blocking:
        return f"Blocked: {_tally(blocking)} failed.{also}"
    if decision == "block":
        return f"Blocked, though the decision lists no failure this report can show.{also}"
    prefix = "" if decision == "ship" else "No release decision in this report. "
    if not found:
        verb = "holds" if len(holding) == 1 and holding[0].startswith("1 ") else "hold"
        return f"{prefix}Nothing failed: {', '.join(holding)} {verb}."
    effect = "it does not" if len(other) == 1 else "they do not"
    lead = "Ships, but" if decision == "ship" else prefix.strip()
    return f"{lead} {_tally(other)} failed; {effect} block the release."


def _tally(found: Sequence[Failure]) -> str:
    """``2 gates, 1 slice and 1 baseline regression``: the failures counted by kind, in order."""
    kinds: dict[str, int] = {}
    for failure in found:
        kinds[failure.what] = kinds.get(failure.what, 0) + 1
    parts = [_counted(n, what) for what, n in kinds.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def failed_section(
    decision: str | None,
    found: Sequence[Failure],
    holding: Sequence[str],
    *,
    causes: Mapping | None = None,
    extra: str = "",
    case_explorer: str | None = CASE_EXPLORER_PAGE,
) -> str:
    """``<section id="failed">``: the :func:`verdict`, why a blocked release is blocked (``causes``: where
    its failing cases stop and the worst of them), the failures that block and then those that do not,
    each linked to the section with its details, ``extra`` (escaped HTML), and the link to the run's
    case explorer."""
    status = "fail" if any(f.blocks for f in found) else "warn" if found else "pass"
    text = esc(verdict(decision, found, holding))
    parts = [f'<p class="verdict {status}" data-verdict="{status}">{text}</p>']
    if decision == "block":
        parts.append(why_html(causes))
    for blocks, cls, heading in ((True, "reasons", "Blocks the release"), (False, "soft", "Does not block")):
        items = [_item(f) for f in found if f.blocks is blocks]
        if items:
            parts.append(f'<h3>{heading}</h3><ul class="{cls}">{"".join(items)}</ul>')
    parts.append(extra)
    if case_explorer:
        link = f'<a href="{esc(case_explorer)}" data-link="case-explorer">case explorer</a>'
        parts.append(f'<p class="explorer">Every case of this run, its answer and its scores: {link}.</p>')
    return section("failed", "What failed", *parts)


def _item(failure: Failure) -> str:
    details = f' <a class="more" href="#{failure.section}">details</a>' if failure.section else ""
    name = f"<b>{esc(failure.name)}</b>" if failure.name else ""
    return f"<li>{esc(failure.what)} {name}{esc(failure.detail)}{details}</li>"


# -- the failures, one kind at a time -----------------------------------------------------------


def _failed_gates(report: Mapping, release: Mapping) -> tuple[list[Mapping], list[Mapping]]:
    """The failed hard and soft gates: the decision's lists, else the report's gate rows."""
    if "failed_gates" in release or "warned_gates" in release:
        return (
            [mapping(g) for g in release.get("failed_gates") or []],
            [mapping(g) for g in release.get("warned_gates") or []],
        )
    rows = [mapping(g) for g in report.get("gates") or []]
    return [g for g in rows if gate_status(g) == "fail"], [g for g in rows if gate_status(g) == "warn"]


def _gate_detail(gate: Mapping) -> str:
    """`` = 0.7100, needs ≥ 0.8000 (Δ -0.0900)``: the value first, then what it needed."""
    value, threshold = finite(gate.get("value")), finite(gate.get("threshold"))
    delta = gate.get("delta")
    if finite(delta) is None and value is not None and threshold is not None:
        delta = value - threshold
    shown = gate_delta({"metric": gate.get("metric"), "delta": delta})
    return f" = {gate_figure(gate.get('metric'), value)}, {needs(gate)} (Δ {shown})"


def _hard(gate: Mapping) -> bool:
    return (gate.get("severity") or "hard") == "hard"


def _unmeasured(gate: Mapping) -> str:
    effect = "it fails" if _hard(gate) else "a warning"
    why = f" ({gate['reason']})" if gate.get("reason") else ""  # the field its traces lack, when known
    return f" ({gate.get('severity') or 'hard'}) was not measured{why}, {needs(gate)}: {effect}"


def _failed_slices(report: Mapping, release: Mapping, gate: SliceGate) -> list[Mapping]:
    """The decision's failed slices; without a decision, the slices the gate's rule fails."""
    if isinstance(release.get("failed_slices"), list):
        return [mapping(s) for s in release["failed_slices"]]
    failed = []
    for dimension, values in mapping(report.get("slices")).items():
        for value, entry in mapping(values).items():
            entry = mapping(entry)
            if slice_status(str(dimension), str(value), entry, gate, release) == "fail":
                failed.append(
                    {
                        "dimension": dimension,
                        "value": value,
                        "releasable_rate": entry.get("releasable_rate"),
                        "n": entry.get("n"),
                        "ci95": entry.get("releasable_ci95"),
                        "min_rate": gate.min_rate,
                    }
                )
    return failed


def _slice_detail(s: Mapping) -> str:
    return (
        f": releasable {pct(s.get('releasable_rate'))} of {count(s.get('n'))} "
        f"(95% CI {interval(*pair(s.get('ci95')))}), needs ≥ {pct(s.get('min_rate'))}"
    )


def _regression_detail(r: Mapping) -> str:
    current, baseline, delta = finite(r.get("current")), finite(r.get("baseline")), finite(r.get("delta"))
    if delta is None and current is not None and baseline is not None:
        delta = current - baseline
    return f": {fixed(current)} vs baseline {fixed(baseline)} (Δ {signed(delta)})"


def _extraction_failures(extraction: Mapping) -> list[Failure]:
    """Each channel below its baseline threshold, with its correct / total cells where the channel has
    them (extraction thresholds never block the release)."""
    channels = {str(k): mapping(v) for k, v in mapping(extraction.get("channels")).items()}
    out = []
    for f in map(mapping, mapping(extraction.get("baseline")).get("failed") or []):
        channel = channels.get(str(f.get("channel")), {})
        cells = ""
        if finite(channel.get("total")) is not None and finite(channel.get("correct")) is not None:
            cells = f" ({count(channel['correct'])} / {count(channel['total'])} cells)"
        detail = (
            f": accuracy {fixed(f.get('accuracy'))}{cells}, needs ≥ {fixed(f.get('threshold'))} "
            f"(Δ {signed(f.get('delta'))})"
        )
        out.append(Failure("extraction channel", str(f.get("channel")), detail, False, "extraction"))
    return out


def _drops(day: Mapping) -> list[Failure]:
    """The night's alerting drop tests (a production drop warns and alerts, never blocks a release)."""
    out = []
    for alert in map(mapping, mapping(day.get("drop_tests")).get("alerts") or []):
        nights, trailing = count(alert.get("nights")), count(alert.get("trailing_days"))
        worse = finite(alert.get("worse_by"))
        q = finite(alert.get("q_value"))
        detail = (
            f" on {alert.get('slice') or 'all traffic'} ({day.get('day') or 'latest night'}): "
            f"{pct(alert.get('current'))} over the last {nights} night(s) vs {pct(alert.get('trailing'))} "
            f"over the {trailing} before"
            + (f", {100 * worse:.1f} points worse" if worse is not None else "")
            + (f" (q = {q:.2g})" if q is not None else "")
            + (f"; {alert['note']}" if isinstance(alert.get("note"), str) else "")
        )
        out.append(Failure("production drop", str(alert.get("metric")), detail, False, "production"))
    return out


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
