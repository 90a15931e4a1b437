"""Source systems' rules, written the way they write them (Python's ``re`` on text), as test oracles."""

from __future__ import annotations

import re

# RAGSpine's fabrication rule: remove periods (its pattern, compiled ignoring case; \s and \d are
# Unicode-aware on text), then any remaining digit is a fabricated number.
RAGSPINE_PERIOD_RE = re.compile(
    r"(?:FY\s*)?(?:19|20)\d{2}\s*年?\s*(?:H\s*[12]|Q\s*[1-4]|上半年|下半年)?", re.IGNORECASE
)
DIGIT_RE = re.compile(r"\d")


def ragspine_fabricated(answer: str) -> bool:
    return DIGIT_RE.search(RAGSPINE_PERIOD_RE.sub(" ", answer)) is not None


def seed_000_refusal(claim: str) -> bool:
    """The seed-000 scorer: ``claim.strip().lower() == "not in context"``."""
    return claim.strip().lower() == "not in context"
