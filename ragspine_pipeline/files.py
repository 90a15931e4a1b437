"""Writing files so that a reader never sees half of one, and read–change–write under a lock."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TextIO

from ragspine_pipeline import inputs
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


# -- read, change, write: never two at once ---------------------------------------------------------

Change = Callable[[str | None], str | None]
"""The current text (None when the file does not exist) → the text to write (None: write nothing)."""


class VersionedFile(Protocol):
    """A small text file (a baseline, thresholds) that several processes or hosts may update at once.

    :meth:`update` runs a read–change–write so that no other update interleaves: ``change`` always
    sees the text that is current when its result is written. It may be called more than once (an
    optimistic store retries after a conflicting write), so it must only depend on its argument.
    """

    name: str

    def read(self) -> str | None: ...

    def update(self, change: Change) -> str | None: ...


class LockedFile:
    """A local :class:`VersionedFile`: every update holds an exclusive ``flock`` on a sidecar lock file
    (``.<name>.lock`` next to it) from the read to the atomic replace, across processes. A process
    killed while holding it releases the lock with its file descriptors; the file itself is replaced
    in one rename, so it is either the old or the new text, never half of one."""

    def __init__(self, path: str | Path, what: str) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.what = what

    def read(self) -> str | None:
        """The current text, or None when there is no file (unlocked: a snapshot for display)."""
        if not self.path.exists() and not self.path.is_symlink():
            return None
        return inputs.read_text(self.path, self.what)

    def update(self, change: Change) -> str | None:
        """Run ``change`` on the current text under the lock and write its result when it differs;
        return the text the file holds afterwards."""
        with self._locked():
            current = self.read()
            new = change(current)
            if new is None or new == current:
                return current
            write_text_atomically(self.path, new, self.what)
            return new

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.path.with_name(f".{self.path.name}.lock")
        if not lock.parent.is_dir():
            raise InputError(
                self.name, f"cannot lock the {self.what}: directory '{lock.parent}' does not exist"
            )
        try:
            handle = open(lock, "a")  # noqa: SIM115 - held for the whole update
        except OSError as exc:
            raise InputError(self.name, f"cannot lock the {self.what}: {exc.strerror or exc}") from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
