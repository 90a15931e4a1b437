"""The simulated production traffic of bench/bench_drift_alarms.py: what each slice's traces do, night by
night, as probabilities (:meth:`Traffic.probabilities`), and those nights as trace lines
(:meth:`Traffic.day_lines`, the trace-level path). ``drift_synth`` draws the same nights as daily
summaries (the summary-level path)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import numpy as np

FIRST = date(2026, 1, 1)
SEED = 7
VERSION_KEYS = ("index", "retriever")  # what every synthetic trace's `versions` names
DROPPED = "retrieved_citation_rate"  # shipped answers whose citations were all retrieved
CHUNK_TEXT = "the release freeze starts on friday and exceptions are approved by the release manager"
SUPPORTED, UNSUPPORTED = "freeze starts on friday", "budget was doubled"
UNSOUND_SUPPORT = 0.3  # an unsound answer's claims are supported this often
EFFECTS = ("normal", "ar1", "t3")


@dataclass(frozen=True)
class Rates:
    """What a trace does, by probability (before the night's effects)."""

    refusal: float = 0.07
    fabrication: float = 0.03  # of refusals: a number in the refusal text
    cited: float = 0.97  # of shipped answers: carries citations (compliance)
    valid: float = 0.90 / 0.97  # of citing answers: every citation was retrieved (the rate 0.90)
    admissible: float = 0.97  # no restricted chunk retrieved
    supported: float = 0.92  # a claim of a sound answer is supported by its context
    unsound: float = 0.10  # answers whose claims are mostly unsupported (0.3): claims cluster in answers


# The rates a night's effects move (the share of unsound answers stays), in the order they are drawn.
NAMES = tuple(f for f in Rates.__dataclass_fields__ if f != "unsound")


@dataclass(frozen=True)
class Traffic:
    """Synthetic production traffic: ``slices`` equal slices of ``per_slice`` traces a night.

    Night effects: each rate's log-odds moves from night to night by ``jitter`` (its standard deviation),
    independently in every slice or shared by all (``shared``): independent normal draws (``normal``), an
    AR(1) series with correlation ``phi`` from one night to the next and the same marginal SD (``ar1``), or
    Student t draws with 3 degrees of freedom scaled to the same SD (``t3``). ``seed`` makes one history;
    the defaults are the trace-level benchmark's one history."""

    slices: int = 8
    per_slice: int = 125
    jitter: float = 0.0
    shared: bool = False  # one effect a night for all slices (else one per slice)
    rates: Rates = field(default_factory=Rates)
    drop_from: int | None = None  # night index from which the ``drop_rate`` is lower
    drop_slice: int | None = None  # None: every slice (all traffic)
    drop_points: float = 0.0
    drop_rate: str = "valid"  # the Rates field that worsens (valid: the retrieved-citation rate)
    dip_at: int | None = None  # the first night on which the retrieved-citation rate is lower in every slice
    dip_points: float = 0.0
    # A weekly traffic mix: each slice's share of the day's slices × per_slice traces on weekdays and on
    # weekends (None: equal slices every day), and each slice's own retrieved-citation rate.
    weekday_mix: tuple[float, ...] | None = None
    weekend_mix: tuple[float, ...] | None = None
    slice_valid: tuple[float, ...] | None = None
    later_mix: tuple[float, ...] | None = None  # every day's mix from night ``drop_from`` on
    # Independent histories (summary-level scenarios): their own seed, first day and night effects, a drop
    # that ends or creeps, an aberrant stretch of several nights.
    seed: int = SEED
    first: date = FIRST
    effects: str = "normal"  # one of EFFECTS
    phi: float = 0.8  # ar1: the correlation of one night's effect with the next's
    drop_until: int | None = None  # from this night on the rate is back (None: the drop lasts)
    creep: float | None = None  # the drop deepens by this many points a night until ``drop_points``
    dip_nights: int = 1  # how many nights from ``dip_at`` are aberrant

    def sizes(self, night: int) -> list[int]:
        if self.weekday_mix is None:
            return [self.per_slice] * self.slices
        weekend = (self.first + timedelta(days=night)).weekday() >= 5
        mix = self.weekend_mix if weekend else self.weekday_mix
        if self.later_mix is not None and self.drop_from is not None and night >= self.drop_from:
            mix = self.later_mix
        return [round(share * self.slices * self.per_slice) for share in mix]

    def rng(self, night: int) -> np.random.Generator:
        """The night's random numbers: its effects first, then its traces or its counts."""
        return np.random.default_rng([self.seed, night, self.slices, self.per_slice])

    def drop_at(self, night: int) -> float:
        """How many points lower the ``drop_rate`` is on ``night`` (before the night's effects)."""
        if self.drop_from is None or night < self.drop_from:
            return 0.0
        if self.drop_until is not None and night >= self.drop_until:
            return 0.0
        if self.creep:
            return min(self.drop_points, self.creep * (night - self.drop_from + 1))
        return self.drop_points

    def probabilities(self, night: int, rng: np.random.Generator) -> np.ndarray:
        """Each slice's probability of each of ``NAMES`` on ``night`` (slices × names), after the night's
        effects, the drop and the dip."""
        base = np.tile([getattr(self.rates, name) for name in NAMES], (self.slices, 1))
        if self.slice_valid is not None:
            base[:, NAMES.index("valid")] = np.array(self.slice_valid) / self.rates.cited
        shape = (1 if self.shared else self.slices, len(NAMES))
        logit = np.log(base / (1 - base)) + self._effects(night, rng, shape)
        p = 1 / (1 + np.exp(-logit))
        drop = self.drop_at(night)
        if self.drop_from is not None and night >= self.drop_from:
            rows = range(self.slices) if self.drop_slice is None else [self.drop_slice]
            # "valid" is a rate among citing answers: its drop is scaled to one among all answers;
            # more refusals is worse
            scale = (
                self.rates.cited
                if self.drop_rate == "valid"
                else -1.0
                if self.drop_rate == "refusal"
                else 1.0
            )
            for s in rows:
                p[s, NAMES.index(self.drop_rate)] -= drop / scale
        if self.dip_at is not None and self.dip_at <= night < self.dip_at + self.dip_nights:
            p[:, NAMES.index("valid")] -= self.dip_points / self.rates.cited
        return p

    def _effects(self, night: int, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        if self.effects == "normal":  # drawn even without jitter: the steady history's traces stay the same
            return rng.normal(0, self.jitter, shape) * (self.jitter > 0)
        if self.effects == "t3":  # Var t3 = 3
            return rng.standard_t(3, shape) * self.jitter / np.sqrt(3)
        if self.effects == "ar1":
            return self.jitter * _ar1(self.seed, shape, self.phi, night)
        raise ValueError(f"unknown night effects {self.effects!r}: one of {', '.join(EFFECTS)}")

    def day_lines(self, night: int) -> list[str]:
        rng = self.rng(night)
        day = (self.first + timedelta(days=night)).isoformat()
        p = self.probabilities(night, rng)
        lines = []
        for s, size in enumerate(self.sizes(night)):
            prob = dict(zip(NAMES, p[s], strict=True))
            draws = rng.random((size, 9))
            for i in range(size):
                lines.append(_trace(f"{day}-{s}-{i}", f"s{s}", prob, self.rates.unsound, draws[i]))
        return lines


_AR1: dict[tuple, list[np.ndarray]] = {}  # (seed, shape, phi) -> the series so far


def _ar1(seed: int, shape: tuple[int, int], phi: float, night: int) -> np.ndarray:
    """Night ``night`` of a stationary AR(1) series of standard normal effects (correlation ``phi`` from
    one night to the next), the same whichever night is asked first."""
    series = _AR1.setdefault((seed, shape, phi), [])
    while len(series) <= night:
        innovation = np.random.default_rng([seed, len(series), 1_000_003]).standard_normal(shape)
        series.append(phi * series[-1] + np.sqrt(1 - phi * phi) * innovation if series else innovation)
    return series[night]


def _trace(request_id: str, slice_name: str, p: dict, unsound: float, u: np.ndarray) -> str:
    retrieved = ["c1", "c2", "c3"] + (["r1"] if u[0] >= p["admissible"] else [])
    trace = {
        "request_id": request_id,
        "tags": {"slice": slice_name},
        "retrieved_ids": retrieved,
        "selected_context_ids": ["c1", "c2"],
        "selected_versions": ["v1", "v1"],
        "versions": {"index": "ix-1", "retriever": "bm25-1"},
        "latency_ms": 700 + int(600 * u[7]),
    }
    if u[1] < p["refusal"]:
        text = "not in context: it was 42 days" if u[2] < p["fabrication"] else "not in context"
        trace["answer"] = {"claim": text}
        trace["outcome"] = {"refused": True}
        return json.dumps(trace)
    support = p["supported"] if u[3] >= unsound else UNSOUND_SUPPORT
    if u[4] >= p["cited"]:  # no citations at all: one claim, its text judged by token overlap
        trace["answer"] = {"claim": CHUNK_TEXT if u[5] < support else "the budget was doubled last year"}
        return json.dumps(trace)
    cited = "c1" if u[6] < p["valid"] else "c9"  # c9 exists but was not retrieved: an invalid citation
    claims = [
        {
            "claim_id": f"k{k}",
            "text": f"claim {k}",
            "citation_id": cited,
            "support_phrases": [SUPPORTED if draw < support else UNSUPPORTED],
        }
        for k, draw in enumerate((u[5], u[8]))
    ]
    trace["answer"] = {"claim": "The freeze starts on Friday.", "citations": [cited], "claims": claims}
    return json.dumps(trace)


def write_registry(path: Path) -> Path:
    rows = [
        {"chunk_id": cid, "document_id": "freeze", "parent_id": None, "version": "v1",
         "permitted": cid != "r1", "current": True, "text": CHUNK_TEXT}
        for cid in ("c1", "c2", "c3", "c9", "r1")
    ]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


class DemoTraffic:
    """The embedded demo's own production traffic generator, night by night."""

    first = FIRST

    def __init__(self, traces_per_day: int = 300) -> None:
        from ragspine_pipeline.demo.build import production_engine

        self.engine = production_engine()
        self.traces_per_day = traces_per_day

    def day_lines(self, night: int) -> list[str]:
        from ragspine_pipeline.demo.build import production_day_lines

        return production_day_lines(self.engine, FIRST + timedelta(days=night), self.traces_per_day, SEED)
