"""The operating-system side of the local store (`local`): one-line errors, the
writer's name in temporary files, sweeping what dead writers left, the directory
lock of a compare-and-swap, and the pieces of a group commit (syncfs, fsync).

Plain functions of paths, so `LocalStore` keeps to the store's contract.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pith_pipeline._internal.error_text import os_error_hint
from pith_pipeline.core.layout import TEMPORARY
from pith_pipeline.errors import IntegrityError, StorageError
from pith_pipeline.storage.base import Writable, too_large

#: The directory (under the store root) that holds every temporary file.
TMP_DIR = TEMPORARY.rstrip("/")
#: A temporary file older than this is stale whoever wrote it.
STALE_SECONDS = 3600.0
#: Longest wait, in seconds, for the lock of a compare-and-swap (`put_if_match`): the
#: lock is held for a read and a rename, so a longer wait means a suspended holder.
LOCK_WAIT = 5.0


def host_tag() -> str:
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"


def os_error(op: str, path: str | Path, exc: OSError) -> StorageError:
    """One line naming what failed where, with the advice of the one table
    (`_internal/error_text`); transient only where waiting can help."""
    reason = exc.strerror or type(exc).__name__
    transient = exc.errno in (errno.EAGAIN, errno.EINTR, errno.EBUSY)
    return StorageError(f"{op} {path}: {reason}{os_error_hint(exc)}", transient=transient)


def unlistable(exc: OSError) -> None:
    """`os.walk`'s error handler: a directory that cannot be read fails the listing.

    Why not skip it (the default): a listing that silently leaves out an unreadable
    `events/<ID>/` would make `verify` report its events deleted, and a rebuild drop
    them. A directory removed while the walk runs (a concurrent `delete`) was empty.
    """
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return
    raise os_error("cannot list", exc.filename or "", exc) from None


def umask() -> int | None:
    """The process umask, read without changing it (Linux /proc), or None."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def load_syncfs() -> Callable[[int], int] | None:
    """libc's `syncfs(fd)` (Linux), or None where there is none."""
    if not hasattr(os, "sched_getaffinity"):  # not Linux: no syncfs
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int

    def syncfs(fd: int) -> int:
        if fn(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return 0

    return syncfs


#: None where the platform has no syncfs(2); a barrier then fsyncs file by file


def remove_stale(path: str, name: str, removed: list[str]) -> None:
    """Best effort: a file that cannot be removed (gone meanwhile, or not ours to
    remove) is left, and the writer goes on."""
    try:
        os.unlink(path)
    except OSError:
        return
    removed.append(name)


def writer_pid(name: str) -> int | None:
    """The pid in a temporary file's name when its writer ran on this host (`.tmp-<host>-<pid>-…`)."""
    prefix = f".tmp-{host_tag()}-"
    if not name.startswith(prefix):
        return None
    pid_text = name[len(prefix) :].split("-", 1)[0]
    return int(pid_text) if pid_text.isascii() and pid_text.isdigit() else None


def writer_gone(name: str) -> bool:
    """Its writer ran on this host and no longer runs."""
    pid = writer_pid(name)
    return pid is not None and not alive(pid)


def writer_alive(name: str) -> bool:
    """Its writer ran on this host and still runs."""
    pid = writer_pid(name)
    return pid is not None and alive(pid)


def makedirs(path: str, made: list[str]) -> None:
    """`os.makedirs(path, exist_ok=True)` in one mkdir when the parent exists (the
    usual case); appends to `made` each directory created and the one holding it."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    except FileNotFoundError:
        head = os.path.dirname(path)
        if not head or head == path:
            raise
        makedirs(head, made)
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
            return
    made.append(path)
    made.append(os.path.dirname(path))


def fsync_path(path: str, flags: int) -> None:
    try:
        fd = os.open(path, flags | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # replaced or deleted since: what stands there now was synced by its writer
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_temporary(root: str, *, max_age: float, published: bool) -> tuple[str, ...]:
    """Remove temporary files of writers that are gone; returns their names.

    A file in `.tmp/` is stale when its writer (named in it) ran on this host and
    is no longer alive, or when it is older than `max_age` whoever wrote it.

    `published`: also walk every published directory for `.tmp-*` files (and the
    `.tmp-lock-*` files) a writer killed beside the objects it replaced may have left
    in a store written by an older pith-pipeline. Nothing writes there now, so each is
    a leftover, unless its name carries the pid of a live writer of this host. A walk of the
    whole store: `compact` does it, not every run.
    """
    removed: list[str] = []
    tmp_dir = os.path.join(root, TMP_DIR)
    if os.path.isdir(tmp_dir):
        now = time.time()
        for entry in os.scandir(tmp_dir):
            try:
                age = now - entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            if age > max_age or writer_gone(entry.name):
                remove_stale(entry.path, entry.name, removed)
    if published:
        for dirpath, dirs, files in os.walk(root):
            if dirpath == root:
                dirs[:] = [d for d in dirs if d != TMP_DIR]
            for name in files:
                if name.startswith(".tmp-") and not writer_alive(name):
                    path = os.path.join(dirpath, name)
                    remove_stale(path, os.path.relpath(path, root), removed)
    return tuple(removed)


def wrong_kind(root: str, path: str) -> IntegrityError | None:
    """The object path `path` (under the store `root`) occupied by the wrong kind of
    thing, as an `IntegrityError` naming its key; None when that is not why it failed.

    Why: a directory where an object goes, or a file where one of its directories
    goes, is one damaged object of one paper (a tampered or unlucky store), not a
    failure of the store: as a `StorageError` (`cannot create ...: File exists`)
    it would stop the whole run, where the paper alone must stop, named.
    """
    key = path[len(root) + 1 :]
    if os.path.isdir(path) and not os.path.islink(path):
        return IntegrityError(
            "is a directory where an object goes; not replaced (remove it, then run again)", key=key
        )
    head = os.path.dirname(path)
    while len(head) > len(root):
        if os.path.lexists(head) and not os.path.isdir(head):
            return IntegrityError(
                f"cannot be written: {head[len(root) + 1 :]} is a file where a directory "
                "goes (remove it, then run again)",
                key=key,
            )
        head = os.path.dirname(head)
    return None


def _open_directory(directory: str, remake: Callable[[], None]) -> int:
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:  # removed since it was made (another writer's delete)
        remake()
        try:
            return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise os_error("cannot lock", directory, exc) from None
    except OSError as exc:
        raise os_error("cannot lock", directory, exc) from None


@contextlib.contextmanager
def locked_directory(directory: str, remake: Callable[[], None]) -> Iterator[None]:
    """An advisory lock on `directory` (made again by `remake` if a concurrent delete
    removed it), so check-then-replace is one step for writers; it leaves no lock file
    behind.

    Never waited on for long: a holder may be suspended (SIGSTOP, a frozen
    container) while it holds the lock, and a blocking flock(2) would then hang
    every other writer, whatever their --wait and the lease TTL. The lock is tried
    without blocking, again every few milliseconds for at most `LOCK_WAIT`
    seconds, then the write fails with a transient one-line error (a lease
    acquisition keeps trying until its --wait runs out). A holder that dies
    releases it at once (the kernel closes its descriptor)."""
    fd = _open_directory(directory, remake)
    try:
        deadline = time.monotonic() + LOCK_WAIT
        pause = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StorageError(
                        f"cannot write in {directory}: another writer holds its lock and has "
                        f"not gone on for {LOCK_WAIT:.0f} s (suspended?); try again later",
                        transient=True,
                    ) from None
                time.sleep(pause)
                pause = min(0.05, pause * 2)
            except OSError as exc:
                raise os_error("cannot lock", directory, exc) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock


# -- reading an open object ---------------------------------------------------------


def read_whole(fd: int) -> bytes:
    """Every byte of the open file, also when it grows while being read."""
    size = os.fstat(fd).st_size
    chunks = [os.read(fd, size + 1)]  # a short read is the end of the file
    while len(chunks[-1]) > size or (len(chunks) > 1 and chunks[-1]):
        chunks.append(os.read(fd, 1 << 20))  # it grew while being read
    return b"".join(chunks)


def copy_out(fd: int, out: Writable) -> bool:
    """The open file's bytes to `out.write`, 1 MiB at a time (never held whole)."""
    while chunk := os.read(fd, 1 << 20):
        out.write(chunk)
    return True


def read_capped(fd: int, key: str, limit: int) -> bytes:
    """The open file's bytes, refused unread (`too_large`, naming `key`) when its size
    is over `limit`; never more than `limit + 1` bytes are read."""
    size = os.fstat(fd).st_size
    if size > limit:
        raise too_large(key, size, limit)
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:  # grew while being read
        raise too_large(key, None, limit)
    return data


# -- the tree of objects -------------------------------------------------------------


def walk_keys(base: Path, prefix: str) -> Iterator[str]:
    """The keys under `prefix` of the store at `base`, streamed in directory order,
    without the temporary directory and files."""
    start = base / prefix if prefix else base
    # walk only below the deepest directory named by the prefix; a prefix ending
    # in "/" names a directory, and when that is absent nothing can match (walking
    # its parent instead made every per-record `events/<ID>/` listing O(store))
    if prefix.endswith("/") and not start.is_dir():
        return
    walk_root = start if start.is_dir() else start.parent
    if not walk_root.is_dir():
        return
    root = str(base)
    cut = len(root) + 1
    for dirpath, dirs, files in os.walk(walk_root, onerror=unlistable):
        if dirpath == root:
            dirs[:] = [d for d in dirs if d != TMP_DIR]
        rel_dir = dirpath[cut:].replace(os.sep, "/") if dirpath != root else ""
        for name in files:
            if name.startswith(".tmp-"):  # a leftover beside an object, never an object
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rel.startswith(prefix):
                yield rel


def prune_empty(parent: Path, root: Path) -> None:
    """Remove `parent` and each directory above it that is left empty, up to `root`
    (not included): finished runs leave no empty `staging/<run>/` behind."""
    while parent != root and root in parent.parents:
        try:
            parent.rmdir()
        except OSError:  # not empty (or already gone, or not ours): stop here
            break
        parent = parent.parent


def write_file(fd: int, data: bytes | None, src: str | os.PathLike[str] | None, mode: int | None) -> None:
    """Write `data` (or `src`'s content, copied in chunks) to the new file open at
    `fd`, set its `mode` when given, and close it."""
    if src is not None:
        with os.fdopen(fd, "wb") as fh, open(src, "rb") as inp:
            shutil.copyfileobj(inp, fh, 1 << 20)
            fh.flush()
            if mode is not None:
                os.fchmod(fd, mode)
        return
    try:
        body = data or b""
        done = os.write(fd, body)
        if done < len(body):  # a short write: the rest
            view = memoryview(body)[done:]
            while view:
                view = view[os.write(fd, view) :]
        if mode is not None:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
