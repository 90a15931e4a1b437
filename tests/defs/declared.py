"""The demo service as the code location declares it, for tests: its ``defs.yaml`` loaded by Dagster's
component tree (its template variables and ``{{ env.* }}`` read from the environment a test names), and
its definitions composed as the code location composes them (``definitions.location``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from unittest import mock

import dagster as dg

import ragspine_pipeline
import ragspine_pipeline.services
from ragspine_pipeline.component import RagEvaluation, definitions_of
from ragspine_pipeline.definitions import location
from ragspine_pipeline.defs.service import Service

DEMO_DECLARATION = Path(ragspine_pipeline.services.__file__).resolve().parent / "demo"
PROJECT_ROOT = Path(ragspine_pipeline.__file__).resolve().parent.parent


def demo_service(env: Mapping[str, str] | None = None) -> Service:
    """The demo service of ``services/demo/defs.yaml``, as it reads ``env`` (default: this process's
    environment): the environment is ``env`` alone while the declaration resolves."""
    with mock.patch.dict(os.environ, os.environ if env is None else env, clear=True):
        tree = dg.ComponentTree.from_module(ragspine_pipeline.services, PROJECT_ROOT)
        declaration = tree.load_component("demo", RagEvaluation)
        return declaration.service(DEMO_DECLARATION, PROJECT_ROOT)


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
