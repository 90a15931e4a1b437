"""How a service's OpenTelemetry spans become its traces: the settings a reader of spans takes
(``contracts.spans``), and the two forms a span file may be in."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Literal

from ragspine_pipeline import duck

SpanFormat = Literal["otlp", "span_table"]
SPAN_FORMATS: tuple[str, ...] = ("otlp", "span_table")


@dataclass(frozen=True)
class SpanSettings:
    """How a service's spans become its traces (what each setting reads: ``contracts.spans``)."""

    citation_pattern: str | None = None
    citation_attribute: str | None = None
    version_attribute: str = "service.version"
    case_id_attribute: str | None = None

    @classmethod
    def of(cls, holder: Any) -> SpanSettings:
        """The settings ``holder`` names by the same attribute names (a command's arguments, a
        resource's or a SUT's settings; one it lacks keeps its default); ValueError for a setting that
        cannot be."""
        return cls(**{f.name: getattr(holder, f.name, f.default) for f in fields(cls)})

    def __post_init__(self) -> None:
        if self.citation_pattern is not None:
            try:
                groups = re.compile(self.citation_pattern).groups
            except re.error as exc:
                raise ValueError(f"citation pattern {self.citation_pattern!r}: {exc}") from None
            if groups > 1:
                raise ValueError(
                    f"citation pattern {self.citation_pattern!r}: at most one group (the citation id)"
                )
            try:  # DuckDB runs it: RE2's syntax (no look-around, no back-references)
                duck.query(f"SELECT regexp_extract_all('', {duck.literal(self.citation_pattern)}, 0)")
            except duck.REFUSED as exc:
                reason = str(exc).split("\n")[0][:200]
                raise ValueError(
                    f"citation pattern {self.citation_pattern!r}: not RE2 syntax: {reason}"
                ) from None
        for name in ("citation_attribute", "version_attribute", "case_id_attribute"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise ValueError(f"{name}: an attribute name, not a blank")
