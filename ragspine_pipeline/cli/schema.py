"""``ragspine-eval schema TYPE``: the JSON Schema of a record type, derived from its contract model.

What a team writes (golden cases, traces, an evidence registry, an index manifest, extraction facts) is
declared once, as a pydantic model in ``contracts/``; this prints that declaration as JSON Schema, for
validators and code generators on the team's side.
"""

from __future__ import annotations

import argparse
import json

from ragspine_pipeline.contracts.evidence import EvidenceChunk
from ragspine_pipeline.contracts.extraction import ExtractionCell
from ragspine_pipeline.contracts.gold import GoldCase
from ragspine_pipeline.contracts.manifest import IndexManifest
from ragspine_pipeline.contracts.trace import Trace

RECORD_TYPES = {
    "gold": GoldCase,
    "trace": Trace,
    "evidence": EvidenceChunk,
    "manifest": IndexManifest,
    "facts": ExtractionCell,
}


def run_schema(args: argparse.Namespace) -> int:
    schema = RECORD_TYPES[args.type].model_json_schema(mode="validation")
    print(json.dumps(schema, indent=2, ensure_ascii=False))
    return 0
