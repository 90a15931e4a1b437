"""The QA-gate and extraction-channel sections of the HTML report.

:func:`qa_section` reads a report's ``qa_gates`` and ``fabrication`` (RAGSpine's four QA gates, each
over the cases it applies to, and the count of refusals that state a number, as written by
``reports.evaluation.summary``) and any gate on those metrics in its ``gates`` list (whose threshold is
drawn as a tick and whose result colours the row). :func:`extraction_section` reads an extraction result
(``reports.extraction.ExtractionResult.to_dict``); a channel's threshold is known when its baseline lists
it (``thresholds``, or the ``failed`` entry).

Charts: ``qa-gates`` and ``extraction``; with nothing to plot, a note of the same name. A gate with no
case to measure (its pass rate null) or a channel with nothing to measure prints ``n/a`` and is not
plotted; a gate whose cases' traces lack its input says so (:func:`_not_measured`). A QA gate the run
gates shows the gate row's value, numerator, denominator and verdict together (:func:`shown`): they are
one metric result, never the rate of one metric beside the verdict of another.
Values of any JSON shape (failures, mismatches) are shown on one line with :func:`html_parts.compact`,
escaped.
"""

from __future__ import annotations

from collections.abc import Mapping

from ragspine_pipeline.reports.charts import INK, STATUS, Key, esc, finite
from ragspine_pipeline.reports.charts_rows import Row, row_chart
from ragspine_pipeline.reports.html_parts import (
    compact,
    count,
    figure,
    fixed,
    gate_figure,
    gate_status,
    mapping,
    note,
    op,
    pct,
    pill,
    section,
    signed,
    small,
    table,
)

QA_FAILURES = 30  # rows of the failures table; the JSON report has them all
CHANNEL_MISMATCHES = 20  # per failing channel
INVALID_LINES = 50
FABRICATION = "fabrication"
NO_THRESHOLD = "—"


# -- QA gates --------------------------------------------------------------------------------------


def qa_section(report: Mapping) -> str:
    """Pass rate per gate (chart and table, fabrication last), the failing cases, pass rates per tag."""
    names = {str(name) for name in mapping(report.get("qa_gates"))} | {FABRICATION}
    decided = {
        str(g.get("metric")): g for g in map(mapping, report.get("gates") or []) if g.get("metric") in names
    }
    gates = {
        str(name): shown(mapping(gate), decided.get(str(name)))
        for name, gate in mapping(report.get("qa_gates")).items()
    }
    statuses = {name: _qa_status(gate, decided.get(name)) for name, gate in gates.items()}
    fabrication = mapping(report.get(FABRICATION))
    return section(
        "qa-gates",
        "QA gates",
        _qa_chart(gates, statuses, decided),
        _qa_table(gates, statuses, decided, fabrication),
        _qa_failures(report),
        _qa_by_tag(gates),
    )


def shown(gate: Mapping, decided: Mapping | None) -> Mapping:
    """What a QA gate's row shows. When the run gates the metric, its pass rate, passed and total are
    the gate row's value, numerator and denominator — the one result the verdict beside them judged;
    otherwise (or for a report written before gate rows carried a numerator) the QA entry's own."""
    if decided is None or decided.get("numerator") is None or decided.get("denominator") is None:
        return gate
    row = {"pass_rate": decided.get("value"), "passed": decided.get("numerator")}
    return {**gate, **row, "total": decided.get("denominator")}


def _applies(gate: Mapping) -> bool:
    """False when the gate applies to no case (``total`` 0): its pass rate is null, not a measurement."""
    return finite(gate.get("total")) != 0 and finite(gate.get("pass_rate")) is not None


def _not_measured(gate: Mapping) -> str:
    """The cases a gate left out: those whose traces lack its input (and the field), or, without a
    pass rate, that it applies to no case; empty when every case it wants was measured."""
    if lacking := finite(gate.get("unmeasured")):
        return f"{count(lacking)} not measured: their traces lack {gate.get('needs')}"
    return "" if _applies(gate) else "applies to no case"


def _qa_status(gate: Mapping, decided: Mapping | None) -> str:
    """The configured gate's result when there is one; else ``pass`` (every case passes), ``warn`` (some
    fail, nothing blocks on it) or ``na``."""
    if decided is not None:
        return gate_status(decided)
    rate, passed, total = (finite(gate.get(key)) for key in ("pass_rate", "passed", "total"))
    if not _applies(gate) or rate is None:
        return "na"
    every = passed >= total if passed is not None and total is not None else rate >= 1.0
    return "pass" if every else "warn"


def _qa_result(status: str, decided: Mapping | None) -> str:
    return pill(status, warn="warns" if decided is not None else "has failures")


def _threshold(gate: Mapping | None) -> str:
    if gate is None:
        return NO_THRESHOLD
    return f"{op(gate.get('op'))} {gate_figure(gate.get('metric'), gate.get('threshold'))}"


def _qa_chart(gates: Mapping[str, Mapping], statuses: Mapping[str, str], decided: Mapping) -> str:
    rows = [
        Row(
            label=name,
            value=finite(gate.get("pass_rate")) if _applies(gate) else None,
            status=statuses[name],
            marker=finite(mapping(decided.get(name)).get("threshold")),
            value_text=f"{pct(gate.get('pass_rate'))} ({_fraction(gate, 'passed')})",
            note=_not_measured(gate),
        )
        for name, gate in gates.items()
    ]
    if not any(row.value is not None for row in rows):
        return note("No QA gate applies to any case of this golden set: nothing to plot.", "qa-gates")
    keys = (
        [Key("box", STATUS["pass"], "every case passes, or its gate holds")]
        if "pass" in statuses.values()
        else []
    )
    if "warn" in statuses.values():
        keys.append(Key("box", STATUS["warn"], "has failures, no hard gate on it"))
    if "fail" in statuses.values():
        keys.append(Key("box", STATUS["fail"], "fails its gate"))
    if any(row.marker is not None for row in rows):
        keys.append(Key("tick", INK, "gate threshold"))
    chart = row_chart(
        rows,
        title="QA gates: pass rate of each gate",
        description="One bar per QA gate: the share of the cases it applies to that pass it.",
        x_label="pass rate (% of the cases the gate applies to)",
        y_label="QA gate",
        keys=keys,
    )
    return figure(
        "qa-gates", "Pass rate per QA gate over the cases it applies to (passed / applicable)", chart
    )


def _qa_table(
    gates: Mapping[str, Mapping], statuses: Mapping[str, str], decided: Mapping, fabrication: Mapping
) -> str:
    rows = []
    for name, gate in gates.items():
        rate = pct(gate.get("pass_rate")) if _applies(gate) else "n/a"
        rate += f" — {esc(left_out)}" if (left_out := _not_measured(gate)) else ""
        cells = [esc(name), rate, _fraction(gate, "passed")]
        cells += [_threshold(decided.get(name)), _qa_result(statuses[name], decided.get(name))]
        rows.append((statuses[name], cells))
    if fabrication:
        found = finite(fabrication.get("count"))
        status = "na" if found is None else "fail" if found > 0 else "pass"
        checked = f"of {count(fabrication.get('checked'))} answers that should refuse"
        cells = [FABRICATION, f"{count(found)} (target 0)", checked, _threshold(decided.get(FABRICATION))]
        rows.append((status, [*cells, pill(status)]))
    return table(("QA gate", "pass rate", "passed / applicable", "gate", "result"), rows)


def qa_failures(report: Mapping) -> list[tuple[str, object, object, object]]:
    """``(gate, case id, expected, actual)`` of every failing case, gate by gate, then of every refusal
    that states a number (``fabrication``); raw JSON values (the HTML and Markdown reports share it)."""
    failures = [
        (str(name), f.get("id"), f.get("expected"), f.get("actual"))
        for name, gate in mapping(report.get("qa_gates")).items()
        for f in map(mapping, mapping(gate).get("failures") or [])
    ]
    failures += [
        (FABRICATION, case.get("id"), "a refusal stating no number", _fabricated(case))
        for case in map(mapping, mapping(report.get(FABRICATION)).get("cases") or [])
    ]
    return failures


def _qa_failures(report: Mapping) -> str:
    """The first rows of :func:`qa_failures`; the JSON report has them all."""
    failures = qa_failures(report)
    if not failures:
        return note("No case fails a QA gate, and no refusal states a number.", "qa-gates-failures")
    rows = [
        ("", [esc(name), _code(compact(case), "id"), _code(compact(expected)), _code(compact(actual))])
        for name, case, expected, actual in failures[:QA_FAILURES]
    ]
    heading = f"<h3>Failing cases ({len(failures)})</h3>"
    more = len(failures) - QA_FAILURES
    rest = note(f"… and {more} more in the JSON report.", "qa-gates-failures") if more > 0 else ""
    return heading + table(("QA gate", "case", "expected", "actual"), rows, figures_from=4) + rest


def _qa_by_tag(gates: Mapping[str, Mapping]) -> str:
    """``dimension=value`` rows × gate columns; ``n/a`` where the gate applies to no case of the tag."""
    by_tag = {name: mapping(gate.get("by_tag")) for name, gate in gates.items()}
    tags = sorted(
        {
            (str(dim), str(value))
            for tagged in by_tag.values()
            for dim, values in tagged.items()
            for value in mapping(values)
        }
    )
    if not tags:
        return ""
    rows = []
    for dim, value in tags:
        cells = [_tag_cell(mapping(mapping(tagged.get(dim)).get(value))) for tagged in by_tag.values()]
        rows.append(("", [f"{esc(dim)}={esc(value)}", *cells]))
    return "<h3>Pass rate per tag</h3>" + table(("tag", *gates), rows, cls="compact")


def _tag_cell(entry: Mapping) -> str:
    if not entry or finite(entry.get("total")) == 0:
        return "n/a"
    return pct(entry.get("pass_rate")) + small(_fraction(entry, "passed"))


def _fraction(entry: Mapping, part: str) -> str:
    """``passed / total`` (or ``correct / total``) of a gate, tag or channel entry."""
    return f"{count(entry.get(part))} / {count(entry.get('total'))}"


def _fabricated(case: Mapping) -> dict:
    return {"numbers": case.get("numbers"), "answer": case.get("answer")}


def _code(text: str, cls: str = "") -> str:
    return f'<code class="{cls}">{esc(text)}</code>' if cls else f"<code>{esc(text)}</code>"


# -- extraction channels ---------------------------------------------------------------------------


def extraction_section(extraction: Mapping) -> str:
    """Verdict, counts, accuracy per channel (chart and table), mismatches of failing channels, invalid
    fact lines."""
    channels = {str(name): mapping(channel) for name, channel in mapping(extraction.get("channels")).items()}
    baseline = extraction.get("baseline")
    baseline = baseline if isinstance(baseline, Mapping) else None
    checks = channel_checks(channels, baseline)
    return section(
        "extraction",
        "Extraction channels",
        _extraction_verdict(baseline),
        _counts_line(extraction, baseline),
        _extraction_chart(channels, checks),
        _extraction_table(channels, checks),
        *_mismatches(channels, checks),
        _invalid_facts(mapping(extraction.get("invalid_facts"))),
    )


def _measured(channel: Mapping) -> bool:
    return finite(channel.get("total")) != 0


def channel_checks(
    channels: Mapping[str, Mapping], baseline: Mapping | None
) -> dict[str, tuple[str, float | None, str]]:
    """Per channel ``(status, threshold, result text)``: ``fail`` below its threshold, ``pass``, or ``na``
    (no baseline given, or listed but with nothing to measure)."""
    if baseline is None:
        return {name: ("na", None, "not checked") for name in channels}
    thresholds = {str(k): finite(v) for k, v in mapping(baseline.get("thresholds")).items()}
    failed = {str(f.get("channel")): f for f in map(mapping, baseline.get("failed") or [])}
    unmeasured = {str(name) for name in baseline.get("unmeasured") or []}
    checks = {}
    for name in channels:
        threshold = finite(failed[name].get("threshold")) if name in failed else thresholds.get(name)
        if name in failed:
            checks[name] = ("fail", threshold, "FAIL")
        elif name in unmeasured:
            checks[name] = ("na", threshold, "unmeasured")
        else:  # the JSON lists a threshold only when it fails, unless it carries ``thresholds``
            checks[name] = ("pass", threshold, "pass" if threshold is not None else "not failed")
    return checks


def _extraction_verdict(baseline: Mapping | None) -> str:
    if baseline is None:
        return note("No baseline thresholds were given: no channel was checked.", "extraction-baseline")
    failed = [
        f"channel <b>{esc(f.get('channel'))}</b> = {fixed(f.get('accuracy'))}, needs ≥ "
        f"{fixed(f.get('threshold'))} (Δ {signed(f.get('delta'))})"
        for f in map(mapping, baseline.get("failed") or [])
    ]
    if failed:
        return '<ul class="reasons">' + "".join(f"<li>{item}</li>" for item in failed) + "</ul>"
    return '<p class="verdict">Every channel the baseline lists holds its threshold.</p>'


_ORIGIN = (("run_id", "run"), ("index_version", "index"))


def _counts_line(extraction: Mapping, baseline: Mapping | None) -> str:
    invalid = mapping(extraction.get("invalid_facts")).get("count")
    counts = [
        (extraction.get("aligned"), "cells aligned"),
        (extraction.get("facts_only"), "facts without ground truth"),
        (extraction.get("truth_only"), "ground-truth cells not extracted"),
        (extraction.get("duplicates"), "duplicate facts"),
        (invalid, "invalid fact lines"),
    ]
    line = " · ".join(f"<b>{count(n)}</b> {text}" for n, text in counts)
    if baseline is not None and baseline.get("path"):
        line += f" · baseline <code>{esc(baseline['path'])}</code>"
    origin = [f"{label} <code>{esc(extraction[key])}</code>" for key, label in _ORIGIN if extraction.get(key)]
    if origin:  # the extraction result shown may come from an earlier run than the golden one
        line += " · " + ", ".join(origin)
    return f'<p class="counts">{line}</p>'


def _extraction_chart(channels: Mapping[str, Mapping], checks: Mapping[str, tuple]) -> str:
    rows = [
        Row(
            label=name,
            value=finite(channel.get("accuracy")) if _measured(channel) else None,
            status=checks[name][0],
            marker=checks[name][1],
            value_text=f"{fixed(channel.get('accuracy'))} ({_fraction(channel, 'correct')})",
            note="" if _measured(channel) else "nothing to measure",
        )
        for name, channel in channels.items()
    ]
    if not any(row.value is not None for row in rows):
        return note("No extraction channel has a cell to measure: nothing to plot.", "extraction")
    statuses = {row.status for row in rows}
    keys = [Key("box", STATUS["pass"], "not below its threshold")] if "pass" in statuses else []
    if "fail" in statuses:
        keys.append(Key("box", STATUS["fail"], "below its threshold"))
    if "na" in statuses:
        keys.append(Key("box", STATUS["na"], "not checked"))
    if any(row.marker is not None for row in rows):
        keys.append(Key("tick", INK, "baseline threshold"))
    chart = row_chart(
        rows,
        title="Extraction accuracy per channel",
        description="One bar per extraction channel: correct over aligned cells; the tick is its threshold.",
        x_label="accuracy (% of aligned cells correct)",
        y_label="extraction channel",
        keys=keys,
    )
    return figure("extraction", "Accuracy per extraction channel (correct / aligned cells)", chart)


def _extraction_table(channels: Mapping[str, Mapping], checks: Mapping[str, tuple]) -> str:
    rows = []
    for name, channel in channels.items():
        status, threshold, result = checks[name]
        accuracy = fixed(channel.get("accuracy")) if _measured(channel) else "n/a — nothing to measure"
        cells = [esc(name), accuracy, _fraction(channel, "correct")]
        cells += [
            NO_THRESHOLD if threshold is None else fixed(threshold),
            pill(status, na=result, passed=result),
        ]
        rows.append((status, cells))
    if not rows:
        return ""
    return table(("channel", "accuracy", "correct / total", "threshold", "result"), rows)


def _mismatches(channels: Mapping[str, Mapping], checks: Mapping[str, tuple]) -> list[str]:
    """The first mismatches of each failing channel; the other channels' are counted, in the JSON."""
    parts, others = [], []
    for name, channel in channels.items():
        found = [mapping(m) for m in channel.get("mismatches") or []]
        if found and checks[name][0] != "fail":
            others.append(f"{name} {len(found)}")
            continue
        if not found:
            continue
        rows = [
            ("", [_code(compact(m.get(key))) for key in ("cell", "expected", "actual")])
            for m in found[:CHANNEL_MISMATCHES]
        ]
        parts.append(f"<h3>Mismatches: {esc(name)} ({len(found)})</h3>")
        parts.append(table(("cell", "expected", "actual"), rows, figures_from=3))
        if (more := len(found) - CHANNEL_MISMATCHES) > 0:
            parts.append(note(f"… and {more} more in the JSON report.", f"mismatches-{name}"))
    if others:
        text = f"Mismatches of channels that did not fail are in the JSON report: {', '.join(others)}."
        parts.append(note(text, "extraction-mismatches"))
    return parts


def _invalid_facts(invalid: Mapping) -> str:
    errors = [str(e) for e in invalid.get("errors") or []]
    if not errors:
        return ""
    items = "".join(f"<li>{_code(e)}</li>" for e in errors[:INVALID_LINES])
    if (more := len(errors) - INVALID_LINES) > 0:
        items += f"<li>… and {more} more in the JSON report.</li>"
    heading = f"<h3>Invalid fact lines ({count(invalid.get('count'))}), left out of every channel</h3>"
    return heading + f'<ul class="invalid">{items}</ul>'
