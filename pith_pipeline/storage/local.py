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
import errno
import hashlib
import itertools
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pith_pipeline.errors import IntegrityError, StorageError, WriteConflictError
from pith_pipeline.storage.base import Store, StoreLocation, Writable, check_key, file_sha256
from pith_pipeline.storage.local_fs import (
    STALE_SECONDS,
    TMP_DIR,
    copy_out,
    fsync_path,
    host_tag,
    load_syncfs,
    locked_directory,
    makedirs,
    os_error,
    prune_empty,
    read_capped,
    read_whole,
    sweep_temporary,
    umask,
    walk_keys,
    write_file,
    wrong_kind,
)

T = TypeVar("T")

#: Without syncfs, a barrier fsyncs every file written since the last one: past this
#: many the store syncs on its own, so the list of unsynced files stays small.
MAX_PENDING = 4096
#: Directories known to exist, per store; cleared past this size (memory stays flat).
MAX_KNOWN_DIRS = 4096
#: Mode of every published file: readable by all, written by the owner.
FILE_MODE = 0o644


#: None where the platform has no syncfs(2); a barrier then fsyncs file by file
_syncfs: Callable[[int], int] | None = load_syncfs()
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

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).absolute()
        self.url = str(self.root)
        # paths as strings: pathlib costs more per write than the write's syscalls
        self._root = str(self.root)
        self._tmp = f"{self._root}/{TMP_DIR}"
        # durable at each barrier is the default; `fsync=False` (the `local_fsync`
        # setting, PITH_LOCAL_FSYNC=0, given by whoever opens the store) leaves flushing
        # to the OS: same files and bytes, weaker only against power loss (benchmarks
        # and scratch stores)
        self.fsync = fsync
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
        mask = umask()
        self._chmod = mask is None or mask & FILE_MODE != 0

    def _new_prefix(self) -> str:
        # the pid in the name: `sweep_temporary` knows whose file it is; the random
        # part: a dead writer with the same pid left no name we could collide with
        return f".tmp-{host_tag()}-{os.getpid()}-{secrets.token_hex(3)}-"

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

    def _read_failure(self, path: str, exc: OSError) -> StorageError | IntegrityError:
        """What a failed read of the object at `path` is: a directory where it goes is
        that paper's damaged object (`local_fs.wrong_kind`), anything else the store's error."""
        if isinstance(exc, IsADirectoryError):
            return wrong_kind(self._root, path) or os_error("cannot read", path, exc)
        return os_error("cannot read", path, exc)

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
            raise os_error("cannot read", path, exc) from None

    def _read(self, key: str, read: Callable[[int], T]) -> T | None:
        """`read(fd)` of the object opened for reading; None when absent."""
        opened = self._open_object(key)
        if opened is None:
            return None
        fd, path = opened
        try:
            return read(fd)
        except OSError as exc:
            raise self._read_failure(path, exc) from None
        finally:
            os.close(fd)

    def get(self, key: str) -> bytes | None:
        return self._read(key, read_whole)

    def read_into(self, key: str, out: Writable) -> bool:
        """`base.read_into`: the object's bytes to `out.write`, 1 MiB at a time."""
        return self._read(key, lambda fd: copy_out(fd, out)) is not None

    def get_capped(self, key: str, limit: int) -> bytes | None:
        """Like `get`, but an object over `limit` bytes is refused unread (`base.get_capped`)."""
        return self._read(key, lambda fd: read_capped(fd, key, limit))

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._fs(key))

    # -- writes ------------------------------------------------------------------
    def _tmp_dir(self) -> str:
        tmp = self._tmp
        if not self._tmp_ready:
            try:
                os.makedirs(tmp, exist_ok=True)
            except OSError as exc:
                raise os_error("cannot create", tmp, exc) from None
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
                raise os_error("cannot write in", tmp_dir, exc) from None
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
            write_file(fd, data, src, FILE_MODE if self._chmod else None)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise os_error("cannot write", tmp, exc) from None
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
            makedirs(parent, made)
        except OSError as exc:
            wrong = (
                wrong_kind(self._root, str(path))
                if isinstance(exc, FileExistsError | NotADirectoryError)
                else None
            )
            raise wrong or os_error("cannot create", parent, exc) from None
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
                fsync_path(f, os.O_RDONLY)
            for d in sorted(dirs, key=len, reverse=True):  # deepest first
                fsync_path(d, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            with self._lock:  # not durable: the next barrier tries again
                self._pending_files.extend(files)
                self._pending_dirs.update(dirs)
                self._dirty = True
                _LIVE.add(self)
            raise os_error("cannot make durable", self.root, exc) from None

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
            raise wrong_kind(self._root, path) or os_error("cannot write", path, exc) from None

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
            wrong = wrong_kind(self._root, path)
            if wrong is not None:
                raise wrong from None
            if same():
                return False
            raise WriteConflictError(
                f"{key} already exists in {self.url} with different content; "
                "write-once objects are never overwritten"
            ) from None
        except OSError as exc:
            raise wrong_kind(self._root, path) or os_error("cannot write", path, exc) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def list(self, prefix: str) -> Iterator[str]:
        return iter(sorted(self.iter_unsorted(prefix)))

    def iter_unsorted(self, prefix: str) -> Iterator[str]:
        """The keys of `list`, streamed in directory order (nothing held: for counting
        or scanning a large prefix, such as a million papers' `events/`)."""
        return walk_keys(self.root, prefix)

    def delete(self, key: str) -> None:
        """Remove the object, then every directory it leaves empty (up to the root), so
        finished runs leave no empty `staging/<run>/` or `runs/backfill/<run>/` behind."""
        path = Path(self._fs(key))
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise os_error("cannot delete", path, exc) from None
        prune_empty(path.parent, self.root)

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    @contextlib.contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        """The lock of the object's directory (`local_fs.locked_directory`)."""
        self._parent(path)
        with locked_directory(os.path.dirname(path), lambda: self._parent(path, known=False)):
            yield

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
                raise os_error("cannot write", path, exc) from None
            self._written(path, os.path.dirname(path))
            return True

    # -- housekeeping -------------------------------------------------------------
    def sweep_temporary(self, *, max_age: float = STALE_SECONDS, published: bool = False) -> tuple[str, ...]:
        """Remove temporary files of writers that are gone (`local_fs.sweep_temporary`);
        with `published`, also the leftovers beside published objects."""
        return sweep_temporary(self._root, max_age=max_age, published=published)
