"""The record reader: every line of a file validated by its model, the authority on what is valid.

It names the file, line, record id and field of the first record its model rejects, and hands the
valid records on as they were understood: each one reduced to the fields its model declares (values
as validated: an integer id as text, a lax number as a number), in the structure the canonical
statements read (``contracts.canonical``). A file the columnar reader could not vouch for is read
here; so is every JSON array.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ragspine_pipeline.contracts.evidence import EvidenceChunk
from ragspine_pipeline.contracts.gold import QID_ALIASES, GoldCase
from ragspine_pipeline.contracts.jsonl import KeyCountingDict, iter_records
from ragspine_pipeline.contracts.trace import TRACE_QID_ALIASES, Trace
from ragspine_pipeline.errors import InputError

__all__ = ["explain_validation_error", "gold_cases", "plain_records", "unique_records"]


def _validate(model: type[BaseModel], path: Path, line: int, raw: Any, id_aliases: tuple[str, ...]):
    if not isinstance(raw, dict):
        raise InputError(str(path), f"expected a JSON object, got {type(raw).__name__}", line)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise explain_validation_error(exc, path, line, raw, id_aliases) from None


def _member_tag(part) -> bool:
    """Whether a pydantic error loc part names a member of a union (``str``, ``function-before[…]``)
    rather than a field: the contracts name no field so."""
    return isinstance(part, str) and ("[" in part or part in ("str", "float", "int", "bool"))


def explain_validation_error(
    exc: ValidationError, path: Path | str, line: int | None, raw: dict, id_aliases: tuple[str, ...]
) -> InputError:
    """A pydantic error as one ``InputError`` line: file, line, record id, field, message, bad value."""
    errors = exc.errors(include_url=False)
    # A field that takes one of several types (a figure as a number or as a text) fails once per type:
    # the first type's error says what is wrong; the loc names the field, not pydantic's member tags.
    error = errors[0]
    loc = ".".join(str(part) for part in error["loc"] if not _member_tag(part))
    loc = loc or (error.get("ctx") or {}).get("field")
    record_id = next((raw[a] for a in id_aliases if isinstance(raw.get(a), (str, int))), None)
    message = error["msg"]
    context = error.get("ctx") or {}
    if error["type"] == "qa_expectations":  # a rule of the whole case: the value it names, if any
        shown = repr(context["got"]) if "got" in context else None
    elif error["type"] not in ("missing", "answerable_missing"):
        shown = repr(error.get("input"))
    else:
        shown = None
    if shown is not None:
        message += f" (got {shown[:60]}{'…' if len(shown) > 60 else ''})"
    return InputError(str(path), message, line, None if record_id is None else str(record_id), loc)


def unique_records(
    path: str | Path, model: type[BaseModel], id_aliases: tuple[str, ...], key: str, object_pairs_hook=None
) -> Iterator[tuple[int, dict, Any]]:
    """``(line, raw, record)`` for every record of ``path`` validated by ``model``; a repeated ``key`` is
    rejected naming both lines (no key: repeats allowed)."""
    path = Path(path)
    first_line: dict[str, int] = {}
    for line, raw in iter_records(path, object_pairs_hook=object_pairs_hook):
        record = _validate(model, path, line, raw, id_aliases)
        if key:
            value = getattr(record, key)
            if value in first_line:
                message = f"duplicate id (first on line {first_line[value]})"
                raise InputError(str(path), message, line, value, key)
            first_line[value] = line
        yield line, raw, record


def gold_cases(path: str | Path) -> Iterator[GoldCase]:
    """Every gold case of ``path``, fully validated, ids unique (the authoritative reading)."""
    return (case for _, _, case in unique_records(path, GoldCase, QID_ALIASES, "qid"))


_READ = {
    # kind: (model, id aliases, unique key, JSON object hook)
    "gold": (GoldCase, QID_ALIASES, "qid", None),
    "trace": (Trace, TRACE_QID_ALIASES, "", KeyCountingDict.from_pairs),
    "evidence": (EvidenceChunk, ("chunk_id",), "chunk_id", None),
}


def plain_records(path: str | Path, kind: str) -> tuple[list[int], list[str]]:
    """The line number and the plain JSON text of every record of ``path`` (``gold``, ``trace`` or
    ``evidence``), validated by its model (the first invalid one raises, naming its line), in the typed
    structure the canonical statements read (``shape.typed_structure``: a text answer as
    ``answer_text``, versions as ``{key, value}`` pairs)."""
    model, id_aliases, key, hook = _READ[kind]
    lines, texts = [], []
    for line, raw, record in unique_records(path, model, id_aliases, key, hook):
        plain = declared(record)
        if kind == "trace":
            if isinstance(plain.get("answer"), str):  # a text answer: its own typed column
                plain["answer_text"] = plain.pop("answer")
            if "versions" in raw:
                plain["versions"] = _version_pairs(raw["versions"], record)
        lines.append(line)
        texts.append(json.dumps(plain, ensure_ascii=False, allow_nan=False))
    return lines, texts


def declared(value: Any) -> Any:
    """A validated record as plain JSON values, keeping only what its model declares (no extras, no
    nulls), each field under its own name."""
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return {name: declared(getattr(value, name)) for name in fields if getattr(value, name) is not None}
    if isinstance(value, (list, tuple)):
        return [declared(item) for item in value]
    if isinstance(value, dict):
        return {key: declared(item) for key, item in value.items() if item is not None}
    if isinstance(value, date):
        return value.isoformat()
    return value


def _version_pairs(raw: Any, trace: Trace) -> list[dict[str, Any]] | None:
    """``versions`` as ``{key, value}`` pairs in the order written, a repeated key repeated: a list as
    given, an object's entries then its repeated keys (JSON keeps only their last value)."""
    if isinstance(raw, list):
        return [{"key": key, "value": value} for key, value in raw]
    if trace.versions is None:
        return None
    repeated = getattr(raw, "repeated", [])
    return [{"key": key, "value": value} for key, value in trace.versions.items()] + [
        {"key": key, "value": trace.versions.get(key)} for key in repeated
    ]
