"""Writing files so that a reader never sees half of one, JSON Lines, and read–change–write under a lock.

Every local file the pipeline writes goes through one atomic write (:func:`replacing`;
:func:`atomic_output` and :func:`atomic_writer` are its binary and text forms) and every JSON Lines file
through one encoding (:func:`jsonl_line`, :func:`jsonl_lines`, :func:`write_jsonl`). Only appends
(:func:`append_durably`: the alert outbox, the replay's answers) are not replaces; a rewrite of such a
file still goes through the atomic write.

One output rule for every writer (:func:`output_kind`): a regular file or a new path is replaced
atomically; a character device, FIFO or socket (``/dev/stdout``, ``/dev/null``, a named pipe) is
written to directly, never renamed over, unlinked or given a temporary file beside it; a symbolic link
is resolved first and the rule applied to its target (the target is replaced, the link stays a link);
anything else (a directory, a block device) is refused, one line.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol, TextIO

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError

log = logging.getLogger(__name__)


# -- the atomic write --------------------------------------------------------------------------------


ATOMIC = "atomic"
"""What :func:`output_kind` says of a regular file or a new path: replaced in one rename."""
STREAM = "stream"
"""What :func:`output_kind` says of a character device, FIFO or socket: written to directly."""


# Folders of the system's devices and kernel state: nothing of ours (a new output, a lock, an outbox) is
# ever created in them, even by root, who may write there.
SYSTEM_FOLDERS = ("/dev", "/proc", "/sys")


def in_system_folder(path: str | Path) -> bool:
    """Is ``path``, links resolved, in ``/dev``, ``/proc`` or ``/sys`` (or one of them)?"""
    real = os.path.realpath(path)
    return any(real == top or real.startswith(top + "/") for top in SYSTEM_FOLDERS)


def output_kind(path: str | Path) -> str:
    """How an output path is written: :data:`ATOMIC` (a regular file, or nothing there yet: a new file,
    a dangling link's target) or :data:`STREAM` (a character device, FIFO or socket, links followed).

    Anything else (a directory, a block device) is an OSError whose ``strerror`` says what it is, for
    the caller to name: nothing is written over it.
    """
    try:
        mode = os.stat(path).st_mode  # links followed: the rule applies to the target
    except FileNotFoundError:
        if in_system_folder(path):
            raise OSError(
                errno.EACCES, "a new file in a system folder (/dev, /proc, /sys) is refused"
            ) from None
        return ATOMIC  # a new file (or a dangling link's target, created where the link points)
    if stat.S_ISREG(mode):
        return ATOMIC
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return STREAM
    kind = inputs.file_kind(mode)
    refused = f"it is {kind} (an output is a regular file, a character device, a FIFO or a socket)"
    raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL, refused)


@contextmanager
def replacing(path: str | Path, *, text: bool = False) -> Iterator[IO[Any]]:
    """Yield a stream (binary, or UTF-8 text with ``text``) whose content replaces ``path`` when the
    block ends; what every write here is (the rule: :func:`output_kind`). OSErrors propagate, for the
    caller to name.

    Symbolic links are resolved first: the file they point to is replaced, the link kept. The
    temporary file sits next to the target (same file system, so the rename is atomic) and takes the
    target's permission bits (or the umask default for a new file); :func:`replace_durably` makes it the
    target. If the block raises, the target is untouched and the temporary file removed.

    A character device, FIFO or socket (``/dev/null``, ``/dev/stdout``, a named pipe) is opened and
    written as it is: no temporary file, no rename, nothing unlinked (a FIFO's open waits for a reader,
    as a shell's ``>`` does). A directory or a block device is an OSError before anything is written.
    """
    if output_kind(path) == STREAM:
        with _stream(path, text) as out:
            yield out
        return
    target = Path(os.path.realpath(path))
    mode = _file_mode(target)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    replaced = False
    try:
        with os.fdopen(fd, "w" if text else "wb", encoding="utf-8" if text else None) as out:
            yield out
            replace_durably(out, temporary, target, mode)
            replaced = True
    finally:
        if not replaced:
            Path(temporary).unlink(missing_ok=True)


@contextmanager
def _stream(path: str | Path, text: bool) -> Iterator[IO[Any]]:
    """``path`` (a character device, FIFO or socket) opened for writing as it is: no O_CREAT, no
    O_TRUNC, so nothing is made or unlinked; opened by the name given (``/dev/stdout`` reaches a pipe
    that has no name to resolve to). If what was opened is not such a file after all (the path was
    replaced in between), nothing is written."""
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            raise OSError(errno.EAGAIN, "the path changed while it was opened; nothing was written")
        out = os.fdopen(fd, "w" if text else "wb", encoding="utf-8" if text else None)
    except BaseException:
        os.close(fd)
        raise
    with out:
        yield out
        out.flush()


def replace_durably(out: IO[Any], temporary: str | Path, target: str | Path, mode: int) -> None:
    """Make the finished temporary file ``temporary`` (open as ``out``) the file ``target``: flush and
    fsync it, give it ``mode``, rename it over ``target`` and fsync the folder. A crash at any point
    leaves the old file or the whole new one; once this returns, the new one survives a power loss.

    Only a regular file (or nothing) is replaced: a device, FIFO, socket, directory or symbolic link at
    ``target`` (give the resolved path) is an OSError, and it stays as it is (the caller removes the
    temporary file): the last check of the output rule, just before the rename."""
    out.flush()
    os.fsync(out.fileno())
    os.chmod(temporary, mode)
    with suppress(FileNotFoundError):
        if not stat.S_ISREG(found := os.lstat(target).st_mode):
            raise OSError(errno.EEXIST, f"not replacing {inputs.file_kind(found)} with a file")
    os.replace(temporary, target)
    fsync_folder(Path(target).parent)


def fsync_folder(folder: str | Path) -> None:
    """fsync a folder, so that a rename in it is on disk; a file system that cannot sync folders
    (EINVAL) has nothing to sync."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


@contextmanager
def atomic_output(path: str | Path, what: str) -> Iterator[BinaryIO]:
    """:func:`replacing`, binary, with the errors users see: a missing directory or an OS error is an
    InputError naming ``path`` and ``what`` was being written."""
    with _user_errors(path, what), replacing(path) as out:
        yield out


@contextmanager
def atomic_writer(path: str | Path, what: str) -> Iterator[TextIO]:
    """:func:`atomic_output` as UTF-8 text."""
    with _user_errors(path, what), replacing(path, text=True) as out:
        yield out


@contextmanager
def _user_errors(path: str | Path, what: str) -> Iterator[None]:
    """OSErrors as one InputError line naming ``path`` and what was being written (a directory or a
    block device as the output too: :func:`output_kind`)."""
    if not os.path.exists(path):  # a new file: its folder must be there (a device needs none)
        folder = Path(os.path.realpath(path)).parent
        if not folder.is_dir():
            raise InputError(str(path), f"cannot write the {what}: directory '{folder}' does not exist")
    try:
        yield
    except OSError as exc:
        raise InputError(str(path), f"cannot write the {what}: {exc.strerror or exc}") from None


def write_text_atomically(path: str | Path, text: str, what: str) -> None:
    with atomic_writer(path, what) as fh:
        fh.write(text)


def write_if_changed(path: Path, content: str | bytes, what: str) -> bool:
    """Write atomically unless the file already holds exactly this content; True when written.

    What keeps a generator idempotent: re-running it touches nothing whose content would not change.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    if path.is_file() and path.read_bytes() == data:  # a device or FIFO is never read: always written
        return False
    with atomic_output(path, what) as out:
        out.write(data)  # bytes as they are: no newline translation, gzip as is
    return True


def _file_mode(target: Path) -> int:
    """The existing file's permission bits, or the default for a new file under the current umask."""
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


# -- JSON Lines --------------------------------------------------------------------------------------


def jsonl_line(record: Any, *, sort_keys: bool = False) -> str:
    """``record`` as the text of one JSON line (without its newline): characters as they are
    (``ensure_ascii=False``), NaN and infinities refused (ValueError: they are not JSON).

    A string UTF-8 cannot encode — a lone surrogate, from a ``\\ud800`` escape without its pair —
    makes that record's line ASCII instead, every other character escaped too (``\\ud800``), so that
    the file stays UTF-8 and reads back as the same string. :func:`jsonl_lines` counts such records.
    """
    return _encoded(record, sort_keys)[0]


def jsonl_lines(records: Iterable[Any], where: str | Path, *, sort_keys: bool = False) -> Iterator[str]:
    """Each record as one line (with its ``\\n``) as :func:`jsonl_line` writes it; the same records give
    the same text. Once every record is out, one warning names ``where`` and how many were escaped."""
    escaped = 0
    for record in records:
        line, ascii_only = _encoded(record, sort_keys)
        escaped += ascii_only
        yield line + "\n"
    if escaped:
        log.warning(
            "%s: %d record(s) held a lone surrogate (not text, no UTF-8 encodes it): written JSON-escaped",
            where,
            escaped,
        )


def write_jsonl(
    records: Iterable[Any], path: str | Path, what: str = "records", *, sort_keys: bool = False
) -> None:
    """Write ``records`` one JSON value a line (:func:`jsonl_lines`), atomically (:func:`atomic_writer`)."""
    with atomic_writer(path, what) as out:
        out.writelines(jsonl_lines(records, path, sort_keys=sort_keys))


def _encoded(record: Any, sort_keys: bool) -> tuple[str, bool]:
    """The line of ``record`` and whether it had to be escaped to ASCII."""
    text = json.dumps(record, ensure_ascii=False, allow_nan=False, sort_keys=sort_keys)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(record, ensure_ascii=True, allow_nan=False, sort_keys=sort_keys), True
    return text, False


# -- appending whole lines ---------------------------------------------------------------------------


def append_durably(path: Path, data: bytes, what: str) -> None:
    """Append ``data`` (whole lines) to the regular file ``path`` and fsync it. A failed write or fsync
    truncates the file back to where it was, so a full disk leaves no half line; a crash may, and then
    the next line starts on a line of its own (the torn one is set aside by the next read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_regular_for_append(path, what)
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError:
            with suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """The one place an append writes bytes: all of ``data``, or an OSError (a short write is retried,
    and a disk that takes nothing more raises ENOSPC)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _open_regular_for_append(path: Path, what: str) -> int:
    """A read-write, appending descriptor on ``path`` (created if absent) when it is a regular file;
    never blocks on a FIFO."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if os.path.lexists(path):
        inputs.check_regular(path, what)
    fd = os.open(path, flags, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(str(path), "cannot write: not a regular file")
    return fd


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
    from the read to the atomic replace, across processes. A process killed while holding it releases
    the lock with its file descriptors; the file itself is replaced in one rename, so it is either the
    old or the new text, never half of one.

    The lock is keyed on the file, not on the name it was given: it is ``.<name>.lock`` beside the
    *resolved* path (``os.path.realpath``), so two symbolic links to one baseline, or ``a/../b``, take the
    same lock and their updates serialise. A path that resolves to anything but a regular file (or to
    nothing yet) is refused before any lock file is made: no lock is ever created under ``/dev`` or
    ``/proc``, nor in any folder but the file's own.

    The limit: ``flock`` serialises the processes of one host. Two hosts updating one file over a
    network file system (NFS, SMB) may not see each other's locks: share a baseline or thresholds file
    between hosts as an ``s3://`` object instead, updated with conditional writes
    (``sources.versioned``), as the alert outbox shared between hosts is its PostgreSQL store.
    """

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

    def lock_path(self) -> Path:
        """The lock file: ``.<name>.lock`` beside the file this path resolves to (links followed)."""
        target = Path(os.path.realpath(self.path))
        return target.with_name(f".{target.name}.lock")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if os.path.exists(self.path):  # a device, FIFO or directory: refused, and no lock file made
            inputs.check_regular(self.path, self.what)
        lock = self.lock_path()
        if in_system_folder(lock):
            raise InputError(
                self.name, f"cannot lock the {self.what}: no lock file is made in '{lock.parent}'"
            )
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
