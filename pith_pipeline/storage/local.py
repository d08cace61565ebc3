"""A local directory store: the embedded default.

Every write goes to a temporary file in the store's own `.tmp/` directory, then is
renamed (replace) or hard-linked (write-once) into place, so a reader sees the old
object or the new one, never a part, and a published directory never holds a
temporary file. A writer killed half-way leaves its temporary file only in `.tmp/`;
its name carries the writer's host and process id, so the next writer (and
`compact`) removes the files of dead writers (`sweep_temporary`).

Durability is a group commit (git's `core.fsyncMethod=batch` is the model): a write
is not flushed on its own; the store remembers what it wrote and `sync()` makes all
of it durable together, with one `syncfs(2)` on Linux (else an fsync of every file
and every directory that gained an entry). Callers put a barrier before whatever
claims the work (the transparency-log checkpoint, the run manifest, a lease
release, the key document) and every store with unsynced writes is synced at
interpreter exit, so a crash or power loss loses only work nothing claims yet, and
the next run redoes it. A write stays atomic (temporary file, then rename or link):
a process killed at any point leaves the old object or the new one, never a part.

Operating-system failures (a read-only file system, a full disk, permissions)
become one-line `StorageError`s naming the path, never a traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import itertools
import os
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pith_pipeline._internal.error_text import os_error_hint
from pith_pipeline.config import flag
from pith_pipeline.core.layout import TEMPORARY
from pith_pipeline.errors import IntegrityError, StorageError, WriteConflictError
from pith_pipeline.storage.base import Store, StoreLocation, Writable, check_key, file_sha256, too_large

#: The directory (under the store root) that holds every temporary file.
TMP_DIR = TEMPORARY.rstrip("/")
#: A temporary file older than this is stale whoever wrote it.
STALE_SECONDS = 3600.0
#: Without syncfs, a barrier fsyncs every file written since the last one: past this
#: many the store syncs on its own, so the list of unsynced files stays small.
MAX_PENDING = 4096
#: Directories known to exist, per store; cleared past this size (memory stays flat).
MAX_KNOWN_DIRS = 4096
#: Longest wait, in seconds, for the lock of a compare-and-swap (`put_if_match`): the
#: lock is held for a read and a rename, so a longer wait means a suspended holder.
LOCK_WAIT = 5.0
#: Mode of every published file, as before: readable by all, written by the owner.
FILE_MODE = 0o644


def _host_tag() -> str:
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"


def _os_error(op: str, path: str | Path, exc: OSError) -> StorageError:
    """One line naming what failed where, with the advice of the one table
    (`_internal/error_text`); transient only where waiting can help."""
    reason = exc.strerror or type(exc).__name__
    transient = exc.errno in (errno.EAGAIN, errno.EINTR, errno.EBUSY)
    return StorageError(f"{op} {path}: {reason}{os_error_hint(exc)}", transient=transient)


def _unlistable(exc: OSError) -> None:
    """`os.walk`'s error handler: a directory that cannot be read fails the listing.

    Why not skip it (the default): a listing that silently leaves out an unreadable
    `events/<ID>/` made `verify` report its events deleted, and a rebuild would drop
    them. A directory removed while the walk runs (a concurrent `delete`) was empty.
    """
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return
    raise _os_error("cannot list", exc.filename or "", exc) from None


def _umask() -> int | None:
    """The process umask, read without changing it (Linux /proc), or None."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _load_syncfs() -> Callable[[int], int] | None:
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
_syncfs: Callable[[int], int] | None = _load_syncfs()
#: every store with unsynced writes, synced at interpreter exit
#: every store with unsynced writes, synced at interpreter exit; held strongly, so a
#: store dropped before its barrier is still synced
_LIVE: set[LocalStore] = set()


@atexit.register
def _sync_at_exit() -> None:
    """Sync every store with unsynced writes; with syncfs, once per file system (all
    writes are done by now, so one flush covers every store on it)."""
    flushed: set[int] = set()
    for store in list(_LIVE):
        with contextlib.suppress(Exception):  # exiting: a failure here has no one to tell
            if _syncfs is not None:
                dev = os.stat(store._root).st_dev
                if dev in flushed:
                    store._dirty = False
                    continue
                flushed.add(dev)
            store.sync()


class LocalStore(Store):
    """Objects are files under `root`; writes go to `.tmp/`, then rename or link;
    durable together at `sync()`."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool | None = None) -> None:
        self.root = Path(root).absolute()
        self.url = str(self.root)
        # paths as strings: pathlib costs more per write than the write's syscalls
        self._root = str(self.root)
        self._tmp = f"{self._root}/{TMP_DIR}"
        # durable at each barrier is the default; PITH_LOCAL_FSYNC=0 leaves flushing to
        # the OS (same files and bytes, weaker only against power loss: for benchmarks
        # and scratch stores)
        self.fsync = flag("local_fsync") if fsync is None else fsync
        self._pid = os.getpid()
        self._tmp_prefix = self._new_prefix()
        self._counter = itertools.count()
        self._tmp_ready = False
        self._known_dirs: set[str] = set()
        # the group to commit: files written and directories that gained an entry since
        # the last barrier (only kept where there is no syncfs), and whether there is any
        self._lock = threading.Lock()
        self._dirty = False
        self._pending_files: list[str] = []
        self._pending_dirs: set[str] = set()
        # files are created with their final mode when the umask leaves it alone (the
        # usual 022), so there is no chmod per file
        umask = _umask()
        self._chmod = umask is None or umask & FILE_MODE != 0

    def _new_prefix(self) -> str:
        # the pid in the name: `sweep_temporary` knows whose file it is; the random
        # part: a dead writer with the same pid left no name we could collide with
        return f".tmp-{_host_tag()}-{os.getpid()}-{secrets.token_hex(3)}-"

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def local_root(self) -> Path:
        return self.root

    def location(self) -> StoreLocation:
        return StoreLocation(self._root, {}, True, self)

    def arrow_filesystem(self) -> tuple[Any, str]:
        from pyarrow import fs as pafs  # pyarrow only for a reader of Parquet

        return pafs.LocalFileSystem(), self._root

    def _fs(self, key: str) -> str:
        """The file's path for a key; a key that is not a plain relative path (or
        names the temporary directory) is refused."""
        check_key(key)
        return f"{self._root}/{key}"

    def _path(self, key: str) -> Path:
        return Path(self._fs(key))

    def _read_failure(self, path: str, exc: OSError) -> StorageError | IntegrityError:
        """What a failed read of the object at `path` is: a directory where it goes is
        that paper's damaged object (`_wrong_kind`), anything else the store's error."""
        if isinstance(exc, IsADirectoryError):
            return self._wrong_kind(path) or _os_error("cannot read", path, exc)
        return _os_error("cannot read", path, exc)

    def _wrong_kind(self, path: str) -> IntegrityError | None:
        """The object path `path` occupied by the wrong kind of thing, as an
        `IntegrityError` naming its key; None when that is not why it failed.

        Why: a directory where an object goes, or a file where one of its directories
        goes, is one damaged object of one paper (a tampered or unlucky store), not a
        failure of the store: as a `StorageError` (`cannot create ...: File exists`)
        it stopped the whole run, where the paper alone must stop, named.
        """
        key = path[len(self._root) + 1 :]
        if os.path.isdir(path) and not os.path.islink(path):
            return IntegrityError(
                "is a directory where an object goes; not replaced (remove it, then run again)", key=key
            )
        head = os.path.dirname(path)
        while len(head) > len(self._root):
            if os.path.lexists(head) and not os.path.isdir(head):
                return IntegrityError(
                    f"cannot be written: {head[len(self._root) + 1 :]} is a file where a directory "
                    "goes (remove it, then run again)",
                    key=key,
                )
            head = os.path.dirname(head)
        return None

    def _open_object(self, key: str) -> tuple[int, str] | None:
        """Open an object for reading; None when absent.

        The last component is not followed when it is a symbolic link (`O_NOFOLLOW`):
        an object is a regular file this store wrote, and a link planted in the store
        would make it read (and publish from, or vouch for) a file outside it. Such a
        link is an `IntegrityError` naming the key: one damaged object, not a store
        failure.
        """
        path = self._fs(key)
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW), path
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP and os.path.islink(path):
                raise IntegrityError(
                    "is a symbolic link, not an object this store wrote; not read", key=key
                ) from None
            raise _os_error("cannot read", path, exc) from None

    def get(self, key: str) -> bytes | None:
        opened = self._open_object(key)
        if opened is None:
            return None
        fd, path = opened
        try:
            size = os.fstat(fd).st_size
            chunks = [os.read(fd, size + 1)]  # a short read is the end of the file
            while len(chunks[-1]) > size or (len(chunks) > 1 and chunks[-1]):
                chunks.append(os.read(fd, 1 << 20))  # it grew while being read
            return b"".join(chunks)
        except OSError as exc:
            raise self._read_failure(path, exc) from None
        finally:
            os.close(fd)

    def read_into(self, key: str, out: Writable) -> bool:
        """`base.read_into`: the object's bytes to `out.write`, 1 MiB at a time."""
        opened = self._open_object(key)
        if opened is None:
            return False
        fd, path = opened
        try:
            while chunk := os.read(fd, 1 << 20):
                out.write(chunk)
        except OSError as exc:
            raise self._read_failure(path, exc) from None
        finally:
            os.close(fd)
        return True

    def get_capped(self, key: str, limit: int) -> bytes | None:
        """Like `get`, but an object over `limit` bytes is refused unread (`base.get_capped`)."""
        opened = self._open_object(key)
        if opened is None:
            return None
        fd, path = opened
        try:
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > limit:
                    raise too_large(key, size, limit)
                data = fh.read(limit + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._read_failure(path, exc) from None
        if len(data) > limit:  # grew while being read
            raise too_large(key, None, limit)
        return data

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._fs(key))

    # -- writes ------------------------------------------------------------------
    def _tmp_dir(self) -> str:
        tmp = self._tmp
        if not self._tmp_ready:
            try:
                os.makedirs(tmp, exist_ok=True)
            except OSError as exc:
                raise _os_error("cannot create", tmp, exc) from None
            self._tmp_ready = True
        return tmp

    def _forked(self) -> None:
        """After a fork: our own temporary names and our own group to commit."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._tmp_prefix = self._new_prefix()
            self._pending_files, self._pending_dirs, self._dirty = [], set(), False

    def _open_tmp(self, tmp_dir: str) -> tuple[int, str]:
        """A new temporary file, opened for writing: (fd, path)."""
        self._forked()
        for _attempt in range(100):
            tmp = f"{tmp_dir}/{self._tmp_prefix}{next(self._counter)}"
            try:
                return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE), tmp
            except FileExistsError:
                continue
            except FileNotFoundError:  # `.tmp/` removed under us: make it again
                self._tmp_ready = False
                tmp_dir = self._tmp_dir()
            except OSError as exc:
                raise _os_error("cannot write in", tmp_dir, exc) from None
        raise StorageError(f"cannot write in {tmp_dir}: no free temporary file name")

    def _link_tmp(self, src: str) -> str:
        """A new temporary name in `.tmp/` for `src`'s file (a hard link, no new file)."""
        tmp_dir = self._tmp_dir()
        self._forked()
        for _attempt in range(100):
            tmp = f"{tmp_dir}/{self._tmp_prefix}{next(self._counter)}"
            try:
                os.link(src, tmp)
                return tmp
            except FileExistsError:
                continue
        raise StorageError(f"cannot write in {tmp_dir}: no free temporary file name")

    def _write_tmp(self, data: bytes | None = None, *, src: str | os.PathLike[str] | None = None) -> str:
        """A temporary file in `.tmp/` holding `data` (or `src`'s content, copied in
        chunks); the caller renames or links it into place, then `_written` adds it
        to the group the next barrier makes durable."""
        fd, tmp = self._open_tmp(self._tmp_dir())
        try:
            if src is not None:
                with os.fdopen(fd, "wb") as fh, open(src, "rb") as inp:
                    shutil.copyfileobj(inp, fh, 1 << 20)
                    fh.flush()
                    if self._chmod:
                        os.fchmod(fd, FILE_MODE)
            else:
                try:
                    done = os.write(fd, data or b"")
                    if done < len(data or b""):  # a short write: the rest
                        view = memoryview(data or b"")[done:]
                        while view:
                            view = view[os.write(fd, view) :]
                    if self._chmod:
                        os.fchmod(fd, FILE_MODE)
                finally:
                    os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _os_error("cannot write", tmp, exc) from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def _parent(self, path: str | Path, *, known: bool = True) -> None:
        """Make sure `path`'s directory exists. Directories made or seen are remembered
        (`known=False` after a concurrent `delete` pruned one); each one made is added
        to the group, with its parent, so the next barrier makes the entry durable."""
        parent = os.path.dirname(path)
        if known and parent in self._known_dirs:
            return
        made: list[str] = []
        try:
            _makedirs(parent, made)
        except OSError as exc:
            wrong = (
                self._wrong_kind(str(path)) if isinstance(exc, FileExistsError | NotADirectoryError) else None
            )
            raise wrong or _os_error("cannot create", parent, exc) from None
        if len(self._known_dirs) >= MAX_KNOWN_DIRS:
            self._known_dirs.clear()
        self._known_dirs.add(parent)
        for d in made:
            self._written(None, d)

    def _written(self, path: str | None, directory: str) -> None:
        """Add a file (and the directory that gained its entry) to the group."""
        if not self.fsync:
            return
        with self._lock:
            if not self._dirty:
                self._dirty = True
                _LIVE.add(self)
            if _syncfs is not None:
                return  # one syncfs covers everything: nothing to remember
            if path is not None:
                self._pending_files.append(path)
            self._pending_dirs.add(directory)
            full = len(self._pending_files) + len(self._pending_dirs) >= MAX_PENDING
        if full:
            self.sync()

    def sync(self) -> None:
        """The barrier: make every write of this store since the last barrier durable.

        One `syncfs(2)` of the store's file system where the platform has it (one call
        whatever the number of files; it also flushes other writers' data on that file
        system), else an fsync of every file written and of every directory that
        gained an entry (a new file's name is durable only once its directory is).
        Call it before writing what claims the work; a no-op when nothing was written
        or with PITH_LOCAL_FSYNC=0.
        """
        if self._pid != os.getpid():
            return  # the group belongs to the process that wrote it
        with self._lock:
            if not self._dirty:
                return
            files, dirs = self._pending_files, self._pending_dirs
            self._pending_files, self._pending_dirs, self._dirty = [], set(), False
            _LIVE.discard(self)
        try:
            if _syncfs is not None:
                fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    _syncfs(fd)
                finally:
                    os.close(fd)
                return
            for f in files:
                _fsync_path(f, os.O_RDONLY)
            for d in sorted(dirs, key=len, reverse=True):  # deepest first
                _fsync_path(d, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            with self._lock:  # not durable: the next barrier tries again
                self._pending_files.extend(files)
                self._pending_dirs.update(dirs)
                self._dirty = True
                _LIVE.add(self)
            raise _os_error("cannot make durable", self.root, exc) from None

    def _place(self, op: Callable[[str, str], None], tmp: str, path: str) -> None:
        """`op(tmp, path)`, once more if a concurrent `delete` pruned the directory
        between our mkdir and the rename or link."""
        try:
            op(tmp, path)
        except FileNotFoundError:
            if not os.path.exists(tmp):
                raise
            self._parent(path, known=False)
            op(tmp, path)
        self._written(path, os.path.dirname(path))

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        path = self._fs(key)
        self._parent(path)
        self._replace_with(self._write_tmp(data), path)

    def _replace_with(self, tmp: str, path: str) -> None:
        """Rename the temporary file `tmp` over `path` (atomic replace); on failure the
        temporary file goes and the error names the path."""
        try:
            self._place(os.replace, tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._wrong_kind(path) or _os_error("cannot write", path, exc) from None

    def put_copy(self, key: str, data: bytes, *, of: str) -> None:
        """`base.put_copy`: a hard link to `of`'s file, placed atomically like `put`.

        One object, two names: no second inode and no second copy of the bytes (on
        most file systems creating a file costs far more than linking one). Files here
        are never modified in place (every write is a new file renamed over the old
        one), so the two names change only when this is called again. The linked file
        is read back first: where `of` is missing or holds other bytes than `data`
        (another writer replaced it), `data` are written instead.
        """
        path = self._fs(key)
        src = self._fs(of)
        self._parent(path)
        tmp = ""
        try:
            tmp = self._link_tmp(src)
            with open(tmp, "rb") as fh:
                same = fh.read(len(data) + 1) == data
        except OSError:
            same = False  # no source, another file system, too many links: write it
        if not same:
            with contextlib.suppress(OSError):
                if tmp:
                    os.unlink(tmp)
            self.put(key, data)
            return
        self._replace_with(tmp, path)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        path = self._fs(key)
        self._parent(path)
        return self._link_once(key, path, self._write_tmp(data), lambda: self.get(key) == data)

    def put_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> None:
        """`put` of a file, copied in chunks (never read whole)."""
        path = self._fs(key)
        self._parent(path)
        self._replace_with(self._write_tmp(src=src), path)

    def put_once_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> bool:
        """`put_once` of a file, copied in chunks (never read whole)."""
        path = self._fs(key)
        self._parent(path)
        return self._link_once(
            key, path, self._write_tmp(src=src), lambda: file_sha256(path) == file_sha256(src)
        )

    def _link_once(self, key: str, path: str, tmp: str, same: Callable[[], bool]) -> bool:
        """Link the written temporary file into place unless `path` exists (atomic
        create-if-absent); an existing object with the same content counts as done."""
        try:
            self._place(os.link, tmp, path)
            return True
        except FileExistsError:
            wrong = self._wrong_kind(path)
            if wrong is not None:
                raise wrong from None
            if same():
                return False
            raise WriteConflictError(
                f"{key} already exists in {self.url} with different content; "
                "write-once objects are never overwritten"
            ) from None
        except OSError as exc:
            raise self._wrong_kind(path) or _os_error("cannot write", path, exc) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def list(self, prefix: str) -> Iterator[str]:
        return iter(sorted(self.iter_unsorted(prefix)))

    def iter_unsorted(self, prefix: str) -> Iterator[str]:
        """The keys of `list`, streamed in directory order (nothing held: for counting
        or scanning a large prefix, such as a million papers' `events/`)."""
        base = self.root
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
        for dirpath, dirs, files in os.walk(walk_root, onerror=_unlistable):
            if dirpath == root:
                dirs[:] = [d for d in dirs if d != TMP_DIR]
            rel_dir = dirpath[cut:].replace(os.sep, "/") if dirpath != root else ""
            for name in files:
                if name.startswith(".tmp-"):  # older versions wrote temporaries in place
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if rel.startswith(prefix):
                    yield rel

    def delete(self, key: str) -> None:
        """Remove the object, then every directory it leaves empty (up to the root), so
        finished runs leave no empty `staging/<run>/` or `runs/backfill/<run>/` behind."""
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise _os_error("cannot delete", path, exc) from None
        parent = path.parent
        while parent != self.root and self.root in parent.parents:
            try:
                parent.rmdir()
            except OSError:  # not empty (or already gone, or not ours): stop here
                break
            parent = parent.parent

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    @contextlib.contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        """An advisory lock on the object's directory, so check-then-replace is one step
        for writers; it leaves no lock file behind.

        Never waited on for long: a holder may be suspended (SIGSTOP, a frozen
        container) while it holds the lock, and a blocking flock(2) would then hang
        every other writer, whatever their --wait and the lease TTL. The lock is tried
        without blocking, again every few milliseconds for at most `LOCK_WAIT`
        seconds, then the write fails with a transient one-line error (a lease
        acquisition keeps trying until its --wait runs out). A holder that dies
        releases it at once (the kernel closes its descriptor)."""
        directory = os.path.dirname(path)
        self._parent(path)
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:  # removed since we made it (another writer's delete)
            self._parent(path, known=False)
            try:
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                raise _os_error("cannot lock", directory, exc) from None
        except OSError as exc:
            raise _os_error("cannot lock", directory, exc) from None
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
                    raise _os_error("cannot lock", directory, exc) from None
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        path = self._fs(key)
        with self._locked(path):
            current = self.get_tagged(key)
            if (current[1] if current else None) != tag:
                return False
            tmp = self._write_tmp(data)
            try:
                os.replace(tmp, path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise _os_error("cannot write", path, exc) from None
            self._written(path, os.path.dirname(path))
            return True

    # -- housekeeping -------------------------------------------------------------
    def sweep_temporary(self, *, max_age: float = STALE_SECONDS, published: bool = False) -> tuple[str, ...]:
        """Remove temporary files of writers that are gone; returns their names.

        A file in `.tmp/` is stale when its writer (named in it) ran on this host and
        is no longer alive, or when it is older than `max_age` whoever wrote it.

        `published`: also walk every published directory for `.tmp-*` files (and the
        `.tmp-lock-*` files) that versions before `.tmp/` left beside the objects they
        replaced when killed. Nothing writes there any more, so each is a leftover,
        unless its name carries the pid of a live writer of this host. A walk of the
        whole store: `compact` does it, not every run.
        """
        removed: list[str] = []
        tmp_dir = self.root / TMP_DIR
        if tmp_dir.is_dir():
            now = time.time()
            for entry in os.scandir(tmp_dir):
                try:
                    age = now - entry.stat(follow_symlinks=False).st_mtime
                except FileNotFoundError:
                    continue
                if age > max_age or _writer_gone(entry.name):
                    _remove_stale(entry.path, entry.name, removed)
        if published:
            root = self._root
            for dirpath, dirs, files in os.walk(root):
                if dirpath == root:
                    dirs[:] = [d for d in dirs if d != TMP_DIR]
                for name in files:
                    if name.startswith(".tmp-") and not _writer_alive(name):
                        path = os.path.join(dirpath, name)
                        _remove_stale(path, os.path.relpath(path, root), removed)
        return tuple(removed)


def _remove_stale(path: str, name: str, removed: list[str]) -> None:
    """Best effort: a file that cannot be removed (gone meanwhile, or not ours to
    remove) is left, and the writer goes on."""
    try:
        os.unlink(path)
    except OSError:
        return
    removed.append(name)


def _writer_pid(name: str) -> int | None:
    """The pid in a temporary file's name when its writer ran on this host (`.tmp-<host>-<pid>-…`)."""
    prefix = f".tmp-{_host_tag()}-"
    if not name.startswith(prefix):
        return None
    pid_text = name[len(prefix) :].split("-", 1)[0]
    return int(pid_text) if pid_text.isascii() and pid_text.isdigit() else None


def _writer_gone(name: str) -> bool:
    """Its writer ran on this host and no longer runs."""
    pid = _writer_pid(name)
    return pid is not None and not _alive(pid)


def _writer_alive(name: str) -> bool:
    """Its writer ran on this host and still runs."""
    pid = _writer_pid(name)
    return pid is not None and _alive(pid)


def _makedirs(path: str, made: list[str]) -> None:
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
        _makedirs(head, made)
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
            return
    made.append(path)
    made.append(os.path.dirname(path))


def _fsync_path(path: str, flags: int) -> None:
    try:
        fd = os.open(path, flags | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # replaced or deleted since: what stands there now was synced by its writer
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
