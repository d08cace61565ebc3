"""A local directory store: the embedded default.

Every write goes to a temporary file in the store's own `.tmp/` directory, then is
renamed (replace) or hard-linked (write-once) into place, so a reader sees the old
object or the new one, never a part, and a published directory never holds a
temporary file. A writer killed half-way leaves its temporary file only in `.tmp/`;
its name carries the writer's host and process id, so the next writer (and
`compact`) removes the files of dead writers (`sweep_temporary`).

Operating-system failures (a read-only file system, a full disk, permissions)
become one-line `StorageError`s naming the path, never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pith_pipeline.config import from_env
from pith_pipeline.errors import StorageError, WriteConflictError

#: The directory (under the store root) that holds every temporary file.
TMP_DIR = ".tmp"
#: A temporary file older than this is stale whoever wrote it.
STALE_SECONDS = 3600.0


def _host_tag() -> str:
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"


def _os_error(op: str, path: Path, exc: OSError) -> StorageError:
    """One line naming what failed where; transient only where waiting can help."""
    reason = exc.strerror or type(exc).__name__
    hints = {
        errno.EROFS: " (the store's file system is read-only)",
        errno.ENOSPC: " (the disk is full: free space, then run again)",
        errno.EDQUOT: " (disk quota exceeded: free space, then run again)",
        errno.EACCES: " (permission denied: check the store directory's owner and mode)",
        errno.EPERM: " (operation not permitted: check the store directory's owner and mode)",
    }
    transient = exc.errno in (errno.EAGAIN, errno.EINTR, errno.EBUSY)
    return StorageError(f"{op} {path}: {reason}{hints.get(exc.errno or 0, '')}", transient=transient)


class LocalStore:
    """Objects are files under `root`; writes go to `.tmp/`, then rename or link."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool | None = None) -> None:
        self.root = Path(root).absolute()
        self.url = str(self.root)
        # fsync per object is the durable default; PITH_LOCAL_FSYNC=0 (the `local_fsync`
        # setting, asked of `config` when the caller does not say) leaves flushing to
        # the OS (same files and bytes, weaker only against power loss: for benchmarks
        # and scratch stores, where per-file fsync costs more than building the bundle)
        self.fsync = from_env("local_fsync") != "0" if fsync is None else fsync
        self._tmp_prefix = f".tmp-{_host_tag()}-{os.getpid()}-"

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        parts = key.split("/") if key else []
        if (
            not key
            or key.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
            or parts[0] == TMP_DIR
            or "\x00" in key
        ):
            raise StorageError(f"invalid storage key {key!r}")
        return self.root / key

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _os_error("cannot read", path, exc) from None

    def get_capped(self, key: str, limit: int) -> bytes | None:
        """Like `get`, but an object over `limit` bytes is refused unread (`base.get_capped`)."""
        from pith_pipeline.storage.base import too_large

        path = self._path(key)
        try:
            with path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > limit:
                    raise too_large(key, size, limit)
                data = fh.read(limit + 1)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _os_error("cannot read", path, exc) from None
        if len(data) > limit:  # grew while being read
            raise too_large(key, None, limit)
        return data

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    # -- writes ------------------------------------------------------------------
    def _tmp_dir(self) -> Path:
        tmp = self.root / TMP_DIR
        try:
            tmp.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _os_error("cannot create", tmp, exc) from None
        return tmp

    def _write_tmp(self, data: bytes | None = None, *, src: str | os.PathLike[str] | None = None) -> str:
        """A temporary file in `.tmp/` holding `data` (or `src`'s content, copied in
        chunks), flushed; the caller renames or links it into place."""
        tmp_dir = self._tmp_dir()
        # the pid in the name: `sweep_temporary` knows whose file it is
        if self._tmp_prefix.rsplit("-", 2)[-2] != str(os.getpid()):  # forked since
            self._tmp_prefix = f".tmp-{_host_tag()}-{os.getpid()}-"
        try:
            fd, tmp = tempfile.mkstemp(prefix=self._tmp_prefix, dir=tmp_dir)
        except OSError as exc:
            raise _os_error("cannot write in", tmp_dir, exc) from None
        try:
            with os.fdopen(fd, "wb") as fh:
                if src is not None:
                    with open(src, "rb") as inp:
                        shutil.copyfileobj(inp, fh, 1 << 20)
                else:
                    fh.write(data or b"")
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _os_error("cannot write", Path(tmp), exc) from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def _parent(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _os_error("cannot create", path.parent, exc) from None

    def _place(self, op: Callable[[str, Path], None], tmp: str, path: Path) -> None:
        """`op(tmp, path)`, once more if a concurrent `delete` pruned the directory
        between our mkdir and the rename or link."""
        try:
            op(tmp, path)
        except FileNotFoundError:
            if not os.path.exists(tmp):
                raise
            self._parent(path)
            op(tmp, path)

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        path = self._path(key)
        self._parent(path)
        tmp = self._write_tmp(data)
        try:
            self._place(os.replace, tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _os_error("cannot write", path, exc) from None

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        path = self._path(key)
        self._parent(path)
        return self._link_once(key, path, self._write_tmp(data), lambda: path.read_bytes() == data)

    def put_once_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> bool:
        """`put_once` of a file, copied in chunks (never read whole)."""
        from pith_pipeline.storage.base import file_sha256

        path = self._path(key)
        self._parent(path)
        return self._link_once(
            key, path, self._write_tmp(src=src), lambda: file_sha256(path) == file_sha256(src)
        )

    def _link_once(self, key: str, path: Path, tmp: str, same: Callable[[], bool]) -> bool:
        """Link the written temporary file into place unless `path` exists (atomic
        create-if-absent); an existing object with the same content counts as done."""
        try:
            self._place(os.link, tmp, path)
            return True
        except FileExistsError:
            if same():
                return False
            raise WriteConflictError(
                f"{key} already exists in {self.url} with different content; "
                "write-once objects are never overwritten"
            ) from None
        except OSError as exc:
            raise _os_error("cannot write", path, exc) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def list(self, prefix: str) -> Iterator[str]:
        base = self.root
        start = base / prefix if prefix else base
        # walk only below the deepest directory named by the prefix; a prefix ending
        # in "/" names a directory, and when that is absent nothing can match (walking
        # its parent instead made every per-record `events/<ID>/` listing O(store))
        if prefix.endswith("/") and not start.is_dir():
            return iter(())
        walk_root = start if start.is_dir() else start.parent
        if not walk_root.is_dir():
            return iter(())
        keys = []
        for dirpath, dirs, files in os.walk(walk_root):
            if dirpath == str(base):
                dirs[:] = [d for d in dirs if d != TMP_DIR]
            for name in files:
                if name.startswith(".tmp-"):  # older versions wrote temporaries in place
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), base).replace(os.sep, "/")
                if rel.startswith(prefix):
                    keys.append(rel)
        return iter(sorted(keys))

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
    def _locked(self, path: Path) -> Iterator[None]:
        """An advisory lock on the object's directory, so check-then-replace is one step
        for writers; it leaves no lock file behind."""
        self._parent(path)
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        path = self._path(key)
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
            return True

    # -- housekeeping -------------------------------------------------------------
    def sweep_temporary(self, *, max_age: float = STALE_SECONDS) -> tuple[str, ...]:
        """Remove temporary files of writers that are gone; returns their names.

        A file is stale when its writer (named in it) ran on this host and is no
        longer alive, or when it is older than `max_age` whoever wrote it.
        """
        tmp_dir = self.root / TMP_DIR
        if not tmp_dir.is_dir():
            return ()
        host = _host_tag()
        removed: tuple[str, ...] = ()
        now = time.time()
        for entry in os.scandir(tmp_dir):
            name = entry.name
            stale = False
            try:
                age = now - entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            if age > max_age:
                stale = True
            elif name.startswith(f".tmp-{host}-"):
                pid_text = name[len(f".tmp-{host}-") :].split("-", 1)[0]
                stale = pid_text.isdigit() and not _alive(int(pid_text))
            if stale:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                removed += (name,)
        return removed


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
