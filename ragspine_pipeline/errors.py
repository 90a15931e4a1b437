"""User-facing input errors: one line that names the file, line, id and field."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(unsafe_hash=True)  # not frozen: contextlib sets __traceback__ on an exception leaving a `with`
class InputError(Exception):
    """An input the user must fix. ``str()`` is the whole message, on one line.

    ``line`` is 1-based in the source file; ``record_id`` is the id of the offending record when known.
    """

    file: str
    message: str
    line: int | None = None
    record_id: str | None = None
    field: str | None = None

    def __reduce__(self):
        # A dataclass exception cannot be unpickled the default way (Exception's args are not its fields);
        # results that carry quarantined-line errors travel between Dagster steps as pickles.
        return (type(self), (self.file, self.message, self.line, self.record_id, self.field))

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [where]
        if self.record_id is not None:
            parts.append(f"id={self.record_id}")
        if self.field is not None:
            parts.append(f"field '{self.field}'")
        text = " ".join(": ".join([*parts, self.message]).split())  # never more than one line
        return printable(text)


def printable(text: str) -> str:
    """``text`` with control characters (a terminal escape, say) and lone surrogates (from a ``\\ud800``
    escape in JSON) written as escapes: an error message can always be printed, and shows what it holds."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in text)
