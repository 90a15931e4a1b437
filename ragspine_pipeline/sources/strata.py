"""How many traces each stratum of a day contributes to a stratified sample: proportional, with a floor.

Pure integer arithmetic, so the same populations always give the same allocation on any machine.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULT_FLOOR", "NO_STRATUM", "allocate"]

DEFAULT_FLOOR = 30
# The stratum of a trace without the tag (a trace whose tag value is literally "(none)" shares it).
NO_STRATUM = "(none)"


def allocate(
    populations: Mapping[str, int], n: int, floor: int = DEFAULT_FLOOR
) -> tuple[dict[str, int], bool]:
    """``({stratum: allocated}, exceeded_n)``: split a sample of ``n`` over strata of these sizes.

    Each stratum is owed ``min(floor, population)`` (a stratum smaller than the floor gives all it has).
    The rest follows the populations: a stratum whose proportional share ``n · population / total``
    is below its floor is fixed at the floor, the shares of the others are recomputed over what is left
    (until no share is below its floor), and the shares are rounded by largest remainder (ties: stratum
    name), so the allocations sum to exactly ``n``. No stratum is given more than its population.

    Edge cases: a day with at most ``n`` traces takes them all (the sum is then below ``n``). When the
    floors alone exceed ``n``, the floors win: every stratum gets ``min(floor, population)``, the sum
    is above ``n`` and ``exceeded_n`` is True. A floor exists so that a slice has enough traces for its
    rates to mean something; a sample a little larger than asked is cheaper than slices too small to judge.
    """
    if n < 0 or floor < 0:
        raise ValueError(f"the sample size and the floor must be >= 0, got n={n}, floor={floor}")
    if any(size < 0 for size in populations.values()):
        raise ValueError("a stratum population must be >= 0")
    total = sum(populations.values())
    if total <= n:
        return dict(populations), False
    floors = {stratum: min(floor, size) for stratum, size in populations.items()}
    if sum(floors.values()) >= n:
        return floors, sum(floors.values()) > n
    fixed: dict[str, int] = {}
    free = {stratum: size for stratum, size in populations.items() if size > 0}
    while True:
        budget, size = n - sum(fixed.values()), sum(free.values())
        # share < floor  ⇔  budget · population < floor · size (exact, no division)
        below = [stratum for stratum, pop in free.items() if budget * pop < floors[stratum] * size]
        if not below:
            break
        for stratum in below:
            fixed[stratum] = floors[stratum]
            del free[stratum]
    # `free` cannot run empty: that would need the floors of every stratum to exceed n (handled above).
    shares = {stratum: divmod(budget * pop, size) for stratum, pop in free.items()}
    allocated = {stratum: whole for stratum, (whole, _) in shares.items()}
    left = budget - sum(allocated.values())
    by_remainder = sorted(shares, key=lambda stratum: (-shares[stratum][1], stratum))
    for stratum in by_remainder[:left]:
        allocated[stratum] += 1
    allocated |= fixed
    return {stratum: allocated.get(stratum, 0) for stratum in populations}, False
