"""Index manifest contract: the JSON object a rebuild publishes and the rebuild sensor watches."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragspine_pipeline.contracts.types import Id


class IndexManifest(BaseModel):
    """One build of the index. Fields not named here are allowed and kept (``model_extra``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    index_version: Id  # an integer version is read as its decimal string, like every id
    built_at: str | None = None
    corpus_hash: str | None = None
    # The versions published before this one, oldest first (a publisher appends the version it
    # replaces). Optional; with it, a version superseded before anyone evaluated it is named, not lost.
    previous_versions: list[Id] = Field(default_factory=list)

    @field_validator("index_version")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("index_version must not be empty")
        return value
