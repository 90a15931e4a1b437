"""How asset values are stored between steps on the embedded instance.

Dagster's default filesystem IO manager keeps one pickle per asset (``<storage>/<asset key>``) and
rewrites it in place. Two runs of the whole graph at once — a sensor's re-evaluation overlapping the
nightly run, two ``make run`` — then race: one run reads ``metric_table`` while the other is half-way
through writing it and fails with ``EOFError: Ran out of input``.

:class:`AtomicFilesystemIOManager` is the same store with one change: a value is written to a temporary
file beside its target, flushed, and renamed over it (``os.replace``, atomic on POSIX). A reader sees the
previous value or the new one, never a torn file, so concurrent runs on one instance both finish. The
latest materialization wins, as with Dagster's own manager.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.storage.fs_io_manager import PICKLE_PROTOCOL, PickledObjectFilesystemIOManager


class _AtomicPickles(PickledObjectFilesystemIOManager):
    def dump_to_path(self, context: dg.OutputContext, obj: Any, path: Any) -> None:
        if getattr(path, "protocol", "") not in ("", "file", "local"):  # a remote store: not ours to change
            return super().dump_to_path(context, obj, path)
        target = Path(str(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(obj, fh, PICKLE_PROTOCOL)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return None


class AtomicFilesystemIOManager(dg.ConfigurableIOManagerFactory):
    """Dagster's filesystem IO manager with atomic writes (see the module docstring); ``base_dir``
    defaults to the instance's storage directory, as Dagster's does."""

    base_dir: str | None = None

    def create_io_manager(self, context: dg.InitResourceContext) -> _AtomicPickles:
        base_dir = self.base_dir or context.instance.storage_directory()
        return _AtomicPickles(base_dir=base_dir)
