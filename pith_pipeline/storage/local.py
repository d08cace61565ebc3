"""A local directory store: the embedded default."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from pith_pipeline.errors import StorageError, WriteConflictError


class LocalStore:
    """Objects are files under `root`; writes go to a temporary file, then rename."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool | None = None) -> None:
        self.root = Path(root).absolute()
        self.url = str(self.root)
        # fsync per object is the durable default; PITH_LOCAL_FSYNC=0 leaves flushing to
        # the OS (same files and bytes, weaker only against power loss: for benchmarks
        # and scratch stores, where per-file fsync costs more than building the bundle)
        self.fsync = os.environ.get("PITH_LOCAL_FSYNC", "1") != "0" if fsync is None else fsync

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")):
            raise StorageError(f"invalid storage key {key!r}")
        return self.root / key

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _write_tmp(
        self, path: Path, data: bytes | None = None, *, src: str | os.PathLike[str] | None = None
    ) -> str:
        """A temporary file beside `path` holding `data` (or `src`'s content, copied in
        chunks), flushed; the caller renames or links it into place."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
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
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        os.replace(tmp, path)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        path = self._path(key)
        return self._link_once(key, path, self._write_tmp(path, data), lambda: path.read_bytes() == data)

    def put_once_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> bool:
        """`put_once` of a file, copied in chunks (never read whole)."""
        from pith_pipeline.storage.base import file_sha256

        path = self._path(key)
        return self._link_once(
            key, path, self._write_tmp(path, src=src), lambda: file_sha256(path) == file_sha256(src)
        )

    def _link_once(self, key: str, path: Path, tmp: str, same: Callable[[], bool]) -> bool:
        """Link the written temporary file into place unless `path` exists (atomic
        create-if-absent); an existing object with the same content counts as done."""
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            if same():
                return False
            raise WriteConflictError(
                f"{key} already exists in {self.url} with different content; "
                "write-once objects are never overwritten"
            ) from None
        finally:
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
        for dirpath, _dirs, files in os.walk(walk_root):
            for name in files:
                if name.startswith(".tmp-"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), base).replace(os.sep, "/")
                if rel.startswith(prefix):
                    keys.append(rel)
        return iter(sorted(keys))

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        """An advisory lock beside `path`, so check-then-replace is one step for writers."""
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.parent / f".tmp-lock-{path.name}"
        with open(lock, "a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        path = self._path(key)
        with self._locked(path):
            current = self.get_tagged(key)
            if (current[1] if current else None) != tag:
                return False
            tmp = self._write_tmp(path, data)
            os.replace(tmp, path)
            return True
