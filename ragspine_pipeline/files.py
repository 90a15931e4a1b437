"""Writing files so that a reader never sees half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from ragspine_pipeline.errors import InputError


@contextmanager
def atomic_writer(path: str | Path, what: str) -> Iterator[TextIO]:
    """Yield a text stream whose content replaces ``path`` in one rename when the block ends.

    The temporary file sits next to the target (same file system), is fsynced, keeps the target's
    permission bits (or the umask default for a new file) and writes through a symbolic link rather
    than replacing it. If the block raises, the target is untouched and the temporary file removed.
    A missing directory or an OS error is an InputError naming ``path`` and ``what`` was being written.
    """
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        raise InputError(str(path), f"cannot write the {what}: directory '{target.parent}' does not exist")
    mode = _file_mode(target)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise InputError(str(path), f"cannot write the {what}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str, what: str) -> None:
    with atomic_writer(path, what) as fh:
        fh.write(text)


def write_if_changed(path: Path, content: str | bytes, what: str) -> bool:
    """Write atomically unless the file already holds exactly this content; True when written.

    What keeps a generator idempotent: re-running it touches nothing whose content would not change.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    if path.is_file() and path.read_bytes() == data:
        return False
    with atomic_writer(path, what) as fh:
        fh.flush()
        fh.buffer.write(data)  # bytes straight to the binary layer: no newline translation, gzip as is
    return True


def _file_mode(target: Path) -> int:
    """The existing file's permission bits, or the default for a new file under the current umask."""
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
