"""A night of simulated traffic as its daily summary, drawn directly (the summary-level path of
bench/bench_drift_alarms.py): what ``sample_day`` → ``production_metrics`` would write for the traces
:meth:`Traffic.day_lines` draws, without drawing them.

The night's probabilities are the trace-level path's own (:meth:`Traffic.probabilities`, from the same
seeded generator, so the same night effects); only the sampling of the traces is replaced by its counts.
Per slice of n sampled traces (every trace is sampled unless ``sample_size`` is smaller than the day; then
each slice's share of the sample is hypergeometric, as a uniform sample of the day's traces would give):

* refusals R ~ Bin(n, refusal), fabricating refusals ~ Bin(R, fabrication);
* shipped answers S = n − R, citing ones C ~ Bin(S, cited), all citations retrieved V ~ Bin(C, valid);
* admissible ~ Bin(n, admissible);
* claims: a citing answer has 2, another shipped answer 1; an answer is unsound with probability
  ``unsound`` (its claims supported at 0.3, a sound answer's at ``supported``), so an answer's supported
  claims are Bin(m, q) and the answers are counted by (claims, supported) cell.

The rates are those of ``scoring.production`` over these counts (refusal_rate R/n, production_compliance
(R + C)/n, retrieved_citation_rate V/S, production_admissible_rate, production_fabrication as a count
among R, lexical_faithfulness supported/claims with its cluster-robust ``effective_n`` computed from the
cells as ``_clustered_effective_n`` computes it from the answers), in all traffic and in every slice with
traffic, in the summary's JSON shape (values rounded as ``ProductionMetrics.to_dict`` rounds them).
Latency and token statistics and the admissibility rule counts are left out: no drop test reads them.
"""

from __future__ import annotations

import numpy as np
from drift_traffic import NAMES, UNSOUND_SUPPORT, Traffic

from ragspine_pipeline.scoring.stats import wilson_interval

_DIGITS = 4  # as scoring.production rounds a summary's figures
# An answer's (claims, supported claims) cells: (1, 0), (1, 1), (2, 0), (2, 1), (2, 2).
CELLS = ((1, 0), (1, 1), (2, 0), (2, 1), (2, 2))


def synthesised_summary(traffic: Traffic, night: int, day: str, sample_size: int | None = None) -> dict:
    """The daily summary of ``traffic`` on ``night`` (dated ``day``), as the nightly path would write it
    for a sample of ``sample_size`` traces (None: all of them)."""
    rng = traffic.rng(night)
    p = traffic.probabilities(night, rng)  # the night's effects first, as in Traffic.day_lines
    sizes = np.array(traffic.sizes(night), dtype=np.int64)
    if sample_size is not None and sizes.sum() > sample_size:
        sizes = rng.multivariate_hypergeometric(sizes, sample_size)
    counts = _counts(rng, p, sizes, traffic.rates.unsound)
    present = [s for s in range(traffic.slices) if sizes[s] > 0]
    whole = {name: values[present].sum(axis=0) for name, values in counts.items()}
    return {
        "day": day,
        "n": int(sizes.sum()),
        "metrics": _metrics(whole),
        "slices": {
            "slice": {
                f"s{s}": {"n": int(sizes[s]), "metrics": _metrics({k: v[s] for k, v in counts.items()})}
                for s in present
            }
        },
    }


def _counts(rng: np.random.Generator, p: np.ndarray, n: np.ndarray, unsound: float) -> dict[str, np.ndarray]:
    """Per slice: the counts every rate is computed from, and the answers by (claims, supported) cell."""
    at = {name: p[:, NAMES.index(name)] for name in NAMES}
    refused = rng.binomial(n, at["refusal"])
    fabricated = rng.binomial(refused, at["fabrication"])
    shipped = n - refused
    cited = rng.binomial(shipped, at["cited"])
    valid = rng.binomial(cited, at["valid"])
    admissible = rng.binomial(n, at["admissible"])
    unsound_cited = rng.binomial(cited, unsound)
    unsound_plain = rng.binomial(shipped - cited, unsound)
    cells = np.zeros((len(n), len(CELLS)), dtype=np.int64)
    sound = at["supported"]
    for answers, claims, q in (
        (cited - unsound_cited, 2, sound),
        (unsound_cited, 2, np.full(len(n), UNSOUND_SUPPORT)),
        (shipped - cited - unsound_plain, 1, sound),
        (unsound_plain, 1, np.full(len(n), UNSOUND_SUPPORT)),
    ):
        if claims == 1:
            pmf = np.stack([1 - q, q], axis=1)
        else:
            pmf = np.stack([(1 - q) ** 2, 2 * q * (1 - q), q**2], axis=1)
        drawn = rng.multinomial(answers, pmf)
        first = 0 if claims == 1 else 2
        cells[:, first : first + claims + 1] += drawn
    return {
        "n": n,
        "refused": refused,
        "fabricated": fabricated,
        "shipped": shipped,
        "cited": cited,
        "valid": valid,
        "admissible": admissible,
        "cells": cells,
    }


def _metrics(c: dict) -> dict:
    n, refused, shipped = int(c["n"]), int(c["refused"]), int(c["shipped"])
    claims = np.array([m for m, _ in CELLS])
    supported = np.array([s for _, s in CELLS])
    cells = np.asarray(c["cells"])
    return {
        "refusal_rate": _rate(refused, n),
        "production_compliance": _rate(refused + int(c["cited"]), n),
        "retrieved_citation_rate": _rate(int(c["valid"]), shipped),
        "production_admissible_rate": _rate(int(c["admissible"]), n),
        "production_fabrication": _count(int(c["fabricated"]), refused),
        "lexical_faithfulness": _rate(
            int(cells @ supported), int(cells @ claims), _effective_n(cells, claims, supported)
        ),
    }


def _effective_n(cells: np.ndarray, claims: np.ndarray, supported: np.ndarray) -> float:
    """``scoring.production._clustered_effective_n`` over answers counted by cell: R(1 − R)/Var(R) with
    the cluster-robust Var(R) = a/(a − 1) · Σ(s − R m)² / (Σm)² over the a answers with claims."""
    answers, total = int(cells.sum()), int(cells @ claims)
    if total == 0:
        return 0.0
    ratio = int(cells @ supported) / total
    residual = float(cells @ (supported - ratio * claims) ** 2)
    variance = answers / max(answers - 1, 1) * residual / total**2 if answers > 1 else 0.0
    effective = ratio * (1 - ratio) / variance if variance > 1e-15 else float(answers)
    return min(effective, float(total))


def _interval(k: int, n: int) -> tuple[float, float]:
    low, high = wilson_interval(np.array([k]), np.array([n]))
    return round(float(low[0]), _DIGITS), round(float(high[0]), _DIGITS)


def _rate(k: int, n: int, effective_n: float | None = None) -> dict:
    low, high = _interval(k, n)
    out = {"value": round(k / n, _DIGITS) if n else None, "n": n, "successes": k if n else 0}
    out |= {"low": low, "high": high}
    if effective_n is not None:
        out["effective_n"] = round(effective_n, 2)
    return out


def _count(k: int, n: int) -> dict:
    low, high = _interval(k, n)
    return {"value": k, "n": n, "rate": round(k / n, _DIGITS) if n else None, "low": low, "high": high}
