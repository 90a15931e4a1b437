"""The demo's reference engine as a ``kind: python`` system under test: what a scaffolded service
(``dg scaffold defs ragspine_pipeline.RagEvaluation NAME``) asks until it is pointed at a real one.

It serves the index a demo manifest names (``options: {manifest: …}`` in the SUT settings, else
``$RAGSPINE_HOME/index/manifest.json``, ``var/demo`` by default), read again whenever it changes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ragspine_pipeline.demo.reference_engine import ReferenceEngine

_LOCK = threading.Lock()
_ENGINES: dict[tuple[Path, int], ReferenceEngine] = {}


def ask(case: dict, manifest: str | None = None) -> dict:
    """The demo engine's trace for ``{qid, question, reference_date}``, on the index ``manifest`` names
    (the SUT settings' ``options: {manifest: …}``; by default the one under ``$RAGSPINE_HOME``)."""
    home = Path(os.environ.get("RAGSPINE_HOME", "var/demo"))
    manifest = Path(manifest).absolute() if manifest else home.absolute() / "index" / "manifest.json"
    key = (manifest, manifest.stat().st_mtime_ns)
    with _LOCK:
        engine = _ENGINES.get(key) or _ENGINES.setdefault(key, ReferenceEngine.from_manifest(manifest))
    return engine.answer(case["qid"], case["question"], reference_date=case.get("reference_date"))
