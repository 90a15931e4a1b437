"""Evidence registry contract: the versioned evidence store the layered evaluation joins to.

Traces carry chunk ids only; admissibility and claim support read a chunk's version, permissions,
currency and text from here.
"""

from __future__ import annotations

from pydantic import BaseModel, StrictBool, model_validator

from ragspine_pipeline.contracts.types import MODEL_CONFIG, Id, drop_nulls


class EvidenceChunk(BaseModel):
    """One chunk of the evidence store."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    chunk_id: Id
    document_id: str | None = None
    parent_id: str | None = None
    version: str
    permitted: StrictBool
    current: StrictBool
    text: str
