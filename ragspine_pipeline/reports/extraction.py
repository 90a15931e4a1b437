"""The extraction evaluation report: a JSON-able dict for machines, Markdown for people.

JSON shape (:meth:`ExtractionResult.to_dict`)::

    {"channels": {name: {"total", "correct", "accuracy", "mismatches": [{"cell", "expected", "actual"}]}},
     "aligned", "facts_only", "truth_only", "duplicates",
     "invalid_facts": {"count", "errors": ["file:line: field 'x': message", ...]},
     "baseline": {"path", "thresholds": {channel: threshold},
                  "failed": [{"channel", "accuracy", "threshold", "delta"}], "unmeasured": [...]}
                 or null when no baseline was given,
     "pass": bool}

Figures (accuracy, threshold, delta) are rounded to 4 decimals here, for display only: the verdict was
taken on unrounded values. Cell values in mismatches are shown as given. ``pass`` is False exactly when
a listed channel is below its threshold; quarantined fact lines are reported, they do not fail a run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragspine_pipeline.contracts.extraction import ExtractionCell, FactsLoad
from ragspine_pipeline.decision import extraction_baseline
from ragspine_pipeline.decision.extraction_baseline import ThresholdCheck
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.reports.markdown import code_span
from ragspine_pipeline.scoring.extraction import ChannelScore, ExtractionScore, score_extraction

DECIMALS = 4
MARKDOWN_MISMATCHES = 20  # per channel
MARKDOWN_INVALID_LINES = 50


@dataclass(frozen=True)
class ExtractionResult:
    """One extraction evaluation: the channel scores, what the facts loader set aside, the baseline check."""

    score: ExtractionScore
    duplicates: int
    invalid_facts: list[InputError]
    baseline: ThresholdCheck | None = None

    @classmethod
    def of(
        cls, score: ExtractionScore, facts: FactsLoad, baseline: ThresholdCheck | None = None
    ) -> ExtractionResult:
        return cls(
            score=score, duplicates=facts.duplicates, invalid_facts=list(facts.invalid), baseline=baseline
        )

    @classmethod
    def evaluate(
        cls,
        facts: FactsLoad,
        truth: Mapping[str, ExtractionCell],
        thresholds: Mapping[str, float] | None,
        thresholds_path: str | None = None,
    ) -> ExtractionResult:
        """Score every channel and check it against ``thresholds`` (None: no baseline given)."""
        score = score_extraction(facts.cells, truth)
        check = None
        if thresholds is not None:
            check = extraction_baseline.compare(thresholds, score.accuracies(), thresholds_path)
        return cls.of(score, facts, check)

    @property
    def passed(self) -> bool:
        return self.baseline is None or self.baseline.passed

    def to_dict(self) -> dict[str, Any]:
        score = self.score
        return {
            "channels": {name: _channel_json(channel) for name, channel in score.channels.items()},
            "aligned": score.aligned,
            "facts_only": score.facts_only,
            "truth_only": score.truth_only,
            "duplicates": self.duplicates,
            "invalid_facts": {
                "count": len(self.invalid_facts),
                "errors": [str(e) for e in self.invalid_facts],
            },
            "baseline": None if self.baseline is None else _baseline_json(self.baseline),
            "pass": self.passed,
        }


def figure(value: float | None) -> float | None:
    return None if value is None else round(value, DECIMALS)


def _channel_json(channel: ChannelScore) -> dict[str, Any]:
    return {
        "total": channel.total,
        "correct": channel.correct,
        "accuracy": figure(channel.accuracy),
        "mismatches": [
            {"cell": m.cell, "expected": m.expected, "actual": m.actual} for m in channel.mismatches
        ],
    }


def _baseline_json(check: ThresholdCheck) -> dict[str, Any]:
    return {
        "path": check.path,
        "thresholds": {channel: figure(value) for channel, value in check.thresholds.items()},
        "failed": [
            {
                "channel": f.channel,
                "accuracy": figure(f.accuracy),
                "threshold": figure(f.threshold),
                "delta": figure(f.delta),
            }
            for f in check.failed
        ],
        "unmeasured": list(check.unmeasured),
    }


# -- Markdown -------------------------------------------------------------------------------------------


def render_markdown(result: ExtractionResult) -> str:
    """Verdict line, one table of channels, then up to 20 mismatches per channel and the invalid lines."""
    lines = [f"# Extraction evaluation: {_verdict(result)}", "", _counts_line(result), ""]
    lines += [
        "| channel | accuracy | correct | total | threshold | result |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, channel in result.score.channels.items():
        threshold, outcome = _threshold_outcome(result.baseline, name)
        accuracy = "n/a" if channel.accuracy is None else f"{channel.accuracy:.4f}"
        figures = f"{accuracy} | {channel.correct} | {channel.total}"
        lines.append(f"| {name} | {figures} | {threshold} | {outcome} |")
    for name, channel in result.score.channels.items():
        if not channel.mismatches:
            continue
        lines += ["", f"## Mismatches: {name} ({len(channel.mismatches)})", ""]
        lines += ["| cell | expected | actual |", "|---|---|---|"]
        for m in channel.mismatches[:MARKDOWN_MISMATCHES]:
            lines.append(f"| {_code(m.cell)} | {_code(_json(m.expected))} | {_code(_json(m.actual))} |")
        if (more := len(channel.mismatches) - MARKDOWN_MISMATCHES) > 0:
            lines += ["", f"… and {more} more (see the JSON report)."]
    if result.invalid_facts:
        lines += ["", f"## Invalid fact lines ({len(result.invalid_facts)}), left out of every channel", ""]
        lines += [f"- {_code(str(error))}" for error in result.invalid_facts[:MARKDOWN_INVALID_LINES]]
        if (more := len(result.invalid_facts) - MARKDOWN_INVALID_LINES) > 0:
            lines.append(f"- … and {more} more (see the JSON report).")
    return "\n".join(lines) + "\n"


def _verdict(result: ExtractionResult) -> str:
    if result.baseline is None:
        return "PASS (no baseline given: nothing checked)"
    if result.passed:
        return "PASS"
    below = ", ".join(f"{f.channel} {f.accuracy:.4f} < {f.threshold:.4f}" for f in result.baseline.failed)
    return f"FAIL ({below})"


def _counts_line(result: ExtractionResult) -> str:
    s = result.score
    text = (
        f"{s.aligned} cells aligned, {s.facts_only} facts without ground truth, "
        f"{s.truth_only} ground-truth cells not extracted, {result.duplicates} duplicate facts, "
        f"{len(result.invalid_facts)} invalid fact lines."
    )
    if result.baseline is not None:
        text += f" Baseline: {_code(result.baseline.path or '(in memory)')}."
    return text


def _threshold_outcome(check: ThresholdCheck | None, channel: str) -> tuple[str, str]:
    if check is None or channel not in check.thresholds:
        return "—", "not checked"
    threshold = f"{check.thresholds[channel]:.4f}"
    if channel in check.unmeasured:
        return threshold, "unmeasured"
    if any(f.channel == channel for f in check.failed):
        return threshold, "**FAIL**"
    return threshold, "pass"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _code(text: str) -> str:
    return code_span(text, cell=True)
