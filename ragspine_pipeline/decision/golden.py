"""Golden-set freezing: the golden set is frozen per release, and a content change needs a new version.

``freeze`` writes ``<gold file>.lock`` next to the golden set: the version, the sha256 of the canonical
content, the number of cases, who approved it and when (ISO 8601 UTC). ``verify`` compares the current
content with the lock: ``ok`` (same hash), ``changed`` (a new version must be frozen) or ``unlocked``.

The hash is of the *content*, not of the bytes. Every case is validated with :class:`GoldCase` (every
dialect, aliases resolved, extras kept, duplicate ids rejected), dumped with canonical field names as
compact JSON with sorted keys, one line per case; the lines are sorted by qid and joined with ``\\n``.
Re-formatting, key order, line order, aliases and JSON array vs JSON Lines therefore leave the hash
unchanged; changing, adding or removing anything a case says changes it.

User mistakes (invalid gold, a corrupt lock, an empty version or approver) raise :class:`InputError`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ragspine_pipeline import inputs
from ragspine_pipeline.contracts.gold import GoldCase
from ragspine_pipeline.contracts.records import gold_cases
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import write_text_atomically

LOCK_SUFFIX = ".lock"

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class GoldenLock:
    """What was frozen: one golden version."""

    version: str
    sha256: str
    n_cases: int
    approved_by: str
    frozen_at: str  # ISO 8601 UTC, e.g. "2026-11-22T03:00:00Z"


@dataclass(frozen=True)
class Verification:
    """The current golden set against its lock."""

    status: Literal["ok", "changed", "unlocked"]
    lock: GoldenLock | None  # None when unlocked
    sha256: str  # hash of the current content
    n_cases: int

    def message(self, gold_path: str | Path) -> str:
        """One line, for humans."""
        if self.lock is None:
            return (
                f"{gold_path} has no golden lock ({lock_path(gold_path)}): freeze a version with an approver"
            )
        if self.status == "ok":
            return (
                f"{gold_path} matches golden version {self.lock.version} "
                f"(sha256 {self.sha256}, {self.n_cases} cases, "
                f"approved by {self.lock.approved_by} at {self.lock.frozen_at})"
            )
        return (
            f"{gold_path} changed since golden version {self.lock.version} was frozen "
            f"(frozen sha256 {self.lock.sha256}, now {self.sha256}): "
            "freeze a new version with an approver"
        )


def lock_path(gold_path: str | Path) -> Path:
    """The lock file of a golden set: ``gold.jsonl`` -> ``gold.jsonl.lock``."""
    path = Path(gold_path)
    return path.with_name(path.name + LOCK_SUFFIX)


def content_hash(gold_path: str | Path) -> tuple[str, int]:
    """``(sha256 hex, number of cases)`` of the canonical content of a golden set.

    Raises InputError for malformed JSON, an invalid case, a duplicate id or an empty set.
    """
    cases = sorted(gold_cases(gold_path), key=lambda case: case.qid)
    if not cases:
        raise InputError(str(gold_path), "the golden set has no cases")
    text = "\n".join(_canonical_line(case) for case in cases)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), len(cases)


def freeze(gold_path: str | Path, version: str, approved_by: str, now: datetime | None = None) -> GoldenLock:
    """Freeze the current content as ``version``, approved by ``approved_by``; (over)write the lock.

    ``now`` defaults to the current time; a naive datetime is taken as UTC. Nothing is written when the
    version, the approver or the golden set is invalid.
    """
    version = _label(gold_path, "version", version)
    approved_by = _label(gold_path, "approver", approved_by)
    sha256, n_cases = content_hash(gold_path)
    lock = GoldenLock(version, sha256, n_cases, approved_by, _utc_iso(now or datetime.now(UTC)))
    write_text_atomically(
        lock_path(gold_path), json.dumps(asdict(lock), indent=2, ensure_ascii=False) + "\n", "golden lock"
    )
    return lock


def read_lock(gold_path: str | Path) -> GoldenLock | None:
    """The lock of a golden set, or None when there is none. A corrupt lock raises InputError."""
    path = lock_path(gold_path)
    if not path.exists() and not path.is_symlink():
        return None
    data = inputs.loads(inputs.read_text(path, "golden lock"), str(path))
    return _lock_from_json(path, data)


def verify(gold_path: str | Path) -> Verification:
    """Compare the current content of a golden set with its lock."""
    lock = read_lock(gold_path)
    sha256, n_cases = content_hash(gold_path)
    if lock is None:
        return Verification("unlocked", None, sha256, n_cases)
    return Verification("ok" if lock.sha256 == sha256 else "changed", lock, sha256, n_cases)


# -- helpers ---------------------------------------------------------------------------------------


# Fields the case model gained after golden sets were frozen: left out of the hash while a case does not
# set them, so that every existing lock still verifies.
LATER_FIELDS = ("expect",)


def _canonical_line(case: GoldCase) -> str:
    data = case.model_dump(mode="json")
    # Hashed as the empty list it was read as when the hash was defined, so that every lock made then
    # still verifies (an absent list now scores differently from an empty one only in seed-000 cases).
    if data.get("gold_claim_substr") is None:
        data["gold_claim_substr"] = []
    for name in LATER_FIELDS:
        if data.get(name) is None:
            data.pop(name, None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _label(gold_path: str | Path, what: str, value: Any) -> str:
    """A version or approver: a non-empty, printable, single-line string (stripped)."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(str(gold_path), f"cannot freeze: the {what} is empty")
    value = value.strip()
    if not value.isprintable():
        raise InputError(str(gold_path), f"cannot freeze: the {what} {value!r} has control characters")
    return value


def _utc_iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _lock_from_json(path: Path, data: Any) -> GoldenLock:
    if not isinstance(data, dict):
        raise InputError(str(path), f"golden lock must be a JSON object, got {type(data).__name__}")
    names = [f.name for f in fields(GoldenLock)]
    missing = [name for name in names if name not in data]
    if missing:
        raise InputError(str(path), f"golden lock is missing {', '.join(missing)}")
    for name in ("version", "sha256", "approved_by", "frozen_at"):
        if not isinstance(data[name], str) or not data[name].strip():
            raise InputError(str(path), f"golden lock field '{name}' must be a non-empty string")
    n_cases = data["n_cases"]
    if not isinstance(n_cases, int) or isinstance(n_cases, bool) or n_cases < 0:
        raise InputError(str(path), f"golden lock field 'n_cases' must be a count, got {n_cases!r}")
    if not _SHA256.fullmatch(data["sha256"]):
        raise InputError(str(path), "golden lock field 'sha256' must be 64 lowercase hex digits")
    return GoldenLock(**{name: data[name] for name in names})


def verified_lock(gold_path: str | Path) -> tuple[GoldenLock | None, str | None]:
    """The lock of a golden set whose content matches it, or ``(None, warning)`` when it is not frozen.

    A changed golden set is unusable: :class:`InputError` saying so, both hashes named.
    """
    if read_lock(gold_path) is None:  # cheap: no hashing when there is no lock
        return None, f"{gold_path} is not frozen (no {lock_path(gold_path).name}): scored anyway"
    verification = verify(gold_path)
    if verification.status != "ok":
        raise InputError(str(gold_path), verification.message(gold_path).removeprefix(f"{gold_path} "))
    return verification.lock, None
