"""The demo service as the code location declares it, for tests: its ``defs.yaml`` resolved by the
``RagEvaluation`` component (Dagster's resolution of the attributes), the settings it does not give read
from the environment a test names, and its definitions composed as the code location composes them
(``definitions.location``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
import yaml

import ragspine_pipeline
import ragspine_pipeline.services
from ragspine_pipeline.component import RagEvaluation, definitions_of
from ragspine_pipeline.definitions import location
from ragspine_pipeline.defs.service import Service

DEMO_DECLARATION = Path(ragspine_pipeline.services.__file__).resolve().parent / "demo"
PROJECT_ROOT = Path(ragspine_pipeline.__file__).resolve().parent.parent


def demo_service(env: Mapping[str, str] | None = None) -> Service:
    """The demo service of ``services/demo/defs.yaml``, its other settings from ``env`` (default: this
    process's environment)."""
    document = yaml.safe_load((DEMO_DECLARATION / "defs.yaml").read_text(encoding="utf-8"))
    declaration = RagEvaluation.resolve_from_dict(document["attributes"])
    return declaration.service(DEMO_DECLARATION, PROJECT_ROOT, os.environ if env is None else env)


def demo_definitions(env: Mapping[str, str] | None = None) -> dg.Definitions:
    """The code location of the demo service alone (plain asset keys and job names), as
    :func:`demo_service` reads it."""
    return location(definitions_of(demo_service(env)))


def demo_env(root: Path, out: Path, **env: str) -> dict[str, str]:
    """The environment of a demo written at ``root`` whose outputs go under ``out`` (80 traces a night)."""
    return {
        "RAGSPINE_HOME": str(root),
        "RAGSPINE_REPORTS": str(out / "reports"),
        "RAGSPINE_WORK": str(out / "work"),
        "RAGSPINE_SAMPLE_SIZE": "80",
        "RAGSPINE_ALERTS_OUTBOX": str(out / "alerts" / "outbox.jsonl"),
        **env,
    }
