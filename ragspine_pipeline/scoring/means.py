"""Means over cases that depend only on the set of cases, never on their order.

A float sum taken in input order rounds after every addition, so the same cases read in another order
can give a mean one unit in the last place (ULP) apart — enough for a baseline to block a run that
changed nothing. Here every value is written exactly as an integer numerator over a denominator, the
numerators are summed per (group, denominator) in integer arithmetic, and each mean is one exact
fraction rounded once to the nearest double:

* with ``denominators`` (per-case ratio metrics such as ``hits / n_selected``), each value is taken as
  the exact ratio ``round(value · d) / d`` of its own denominator ``d``: the mean is the exact mean of
  the ratios, so three cases at 1/3, 2/3 and 1/6 average to exactly 7/18 (then rounded), whatever the
  order and whatever each ratio lost when it was stored as a double;
* without, each double is ``digits / 2**k`` exactly (``numpy.frexp``, ``digits`` below 2**53): the mean
  is the exact mean of the doubles.

Numerators are summed with ``numpy.bincount`` split into a high part below 2**27 and a low part below
2**26, at most :data:`BLOCK` values per pass, so every float64 partial sum is an integer below 2**53:
exact, hence independent of order (the int64 totals hold up to 2**36 values). The cost is a handful of
numpy passes over the values (about 20–30 ms per million, where ``pyarrow.compute.mean`` takes 3) plus
a Python step per non-empty (group, denominator) bin — a few dozen per group for metric values, never
one per case.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa

_LOW_BITS = 26  # numerator = high · 2**26 + low, with |high| < 2**27 and 0 <= low < 2**26
BLOCK = 1 << 25  # values per bincount pass: 2**25 · 2**27 = 2**52 < 2**53, so every partial sum is exact


def mean(
    values: pa.Array | pa.ChunkedArray, denominators: pa.Array | pa.ChunkedArray | None = None
) -> float | None:
    """The mean of the non-null ``values``, exact then correctly rounded; None when there is none.

    ``denominators`` (aligned with ``values``) makes each value the exact ratio over its denominator
    (see the module docstring). Raises ValueError for a NaN or infinite value, or a value that is not a
    ratio of its denominator.
    """
    return _means(values, None, 1, denominators)[0]


def group_means(
    values: pa.Array | pa.ChunkedArray,
    groups: np.ndarray,
    n_groups: int,
    denominators: pa.Array | pa.ChunkedArray | None = None,
    rows: np.ndarray | None = None,
) -> list[float | None]:
    """Per group, the mean of its non-null values as :func:`mean` computes it; None for a group with
    no non-null value.

    ``groups[i]`` (in ``range(n_groups)``) is the group of ``values[i]``; with ``rows``, of
    ``values[rows[i]]`` instead, so one value may count in several groups (a case in each of its tag
    slices) while it is split into integers only once.
    """
    return _means(values, np.asarray(groups, dtype=np.intp), n_groups, denominators, rows)


def _means(
    values: pa.Array | pa.ChunkedArray,
    groups: np.ndarray | None,
    n_groups: int,
    denominators: pa.Array | pa.ChunkedArray | None,
    rows: np.ndarray | None = None,
) -> list[float | None]:
    """:func:`group_means`; ``groups`` None puts every value in group 0."""
    valid = np.asarray(values.is_valid(), dtype=bool)
    numbers = np.asarray(values.fill_null(0.0), dtype=np.float64)  # a null adds 0 and is not counted
    if not np.isfinite(numbers).all():
        raise ValueError("cannot average NaN or infinite values")
    if denominators is None:
        numerators, codes, scales = _as_dyadic(numbers)
    else:
        numerators, codes, scales = _as_ratios(numbers, np.asarray(denominators.fill_null(0)))
    if groups is None:
        counts = [int(valid.sum())]
    else:
        if rows is not None:
            numerators, codes, valid = numerators[rows], codes[rows], valid[rows]
        counts = np.bincount(groups[valid], minlength=n_groups).tolist()
    totals = _fraction_sums(numerators, codes, scales, groups, n_groups)
    return [None if count == 0 else float(total / count) for total, count in zip(totals, counts, strict=True)]


def _as_dyadic(numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Fraction]]:
    """Each double as an integer (held in a double, below 2**53) times a power of two, by exponent."""
    if len(numbers) == 0:
        return numbers, np.zeros(0, dtype=np.intp), []
    fraction, exponent = np.frexp(numbers)  # number = fraction · 2**exponent, 0.5 <= |fraction| < 1
    lowest = int(exponent.min())
    scales = [Fraction(2) ** (lowest + code - 53) for code in range(int(exponent.max()) - lowest + 1)]
    return fraction * 2.0**53, exponent.astype(np.intp) - lowest, scales


def _as_ratios(
    numbers: np.ndarray, denominators: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[Fraction]]:
    """Each value as ``numerator / denominator``, by denominator (0 reads as 1: an empty ratio is 0)."""
    denominators = np.maximum(denominators.astype(np.int64), 1)
    # value is the double nearest numerator / denominator, so value · denominator is within about
    # numerator · 2**-52 of the numerator, far below 1/2: rounding recovers it exactly. The check below
    # proves it (the division that made the value is redone) and catches a mismatched denominator.
    numerators = np.rint(numbers * denominators)
    if not np.array_equal(numerators / denominators, numbers):
        raise ValueError("values are not ratios of their denominators")
    present = np.flatnonzero(np.bincount(denominators))
    lookup = np.zeros(int(present[-1]) + 1 if len(present) else 0, dtype=np.intp)
    lookup[present] = np.arange(len(present))
    return numerators, lookup[denominators], [Fraction(1, int(d)) for d in present]


def _fraction_sums(
    numerators: np.ndarray,
    codes: np.ndarray,
    scales: list[Fraction],
    groups: np.ndarray | None,
    n_groups: int,
) -> list[Fraction]:
    """Per group (None: all in group 0), the exact sum of ``numerators[i] · scales[codes[i]]``; every
    numerator is an integer (held in a double) below 2**53 in magnitude."""
    span = max(len(scales), 1)
    size = n_groups * span
    bins = codes if groups is None else groups * span + codes
    high = np.floor(numerators * 2.0**-_LOW_BITS)  # scaling by a power of two and flooring are exact
    low = numerators - high * 2.0**_LOW_BITS
    high_sums = np.zeros(size, dtype=np.int64)
    low_sums = np.zeros(size, dtype=np.int64)
    for start in range(0, len(numerators), BLOCK):
        part = slice(start, start + BLOCK)
        high_sums += np.bincount(bins[part], weights=high[part], minlength=size).astype(np.int64)
        low_sums += np.bincount(bins[part], weights=low[part], minlength=size).astype(np.int64)
    totals = [Fraction(0)] * n_groups
    for item in np.flatnonzero((high_sums != 0) | (low_sums != 0)).tolist():
        group, code = divmod(item, span)
        totals[group] += ((int(high_sums[item]) << _LOW_BITS) + int(low_sums[item])) * scales[code]
    return totals
