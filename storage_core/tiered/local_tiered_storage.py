"""``LocalTieredStorage``: the remote tier as a directory (the embedded default).

Layout: ``<storage dir>/<key>`` for every object key of ``remote_object_keys``, e.g.::

    <storage dir>/tiered/orders-fQZ8ZtKuRjqUmbdf4t1OyQ/3/
        00000000000000004200-Xo1cU9h0TgS2lHKqWgKb7A.log
        00000000000000004200-Xo1cU9h0TgS2lHKqWgKb7A.index
        00000000000000004200-Xo1cU9h0TgS2lHKqWgKb7A.timeindex
        00000000000000004200-Xo1cU9h0TgS2lHKqWgKb7A.snapshot
        00000000000000004200-Xo1cU9h0TgS2lHKqWgKb7A.leader-epoch-checkpoint

Every object is written to a unique ``<name>.<random>.tmp`` next to it, fsynced, checked
against the source's size, renamed into place, and the directory is fsynced once all files
of the segment are in place; a reader therefore sees either no object or a complete one (a
topic manifest or an offsets backup, ``put_object``, is written the same way). A
leftover ``.tmp`` (a copy interrupted by a crash) is never listed and is removed by the next
delete of that segment. Config (``rsm.config.`` prefix optional): ``local.storage.dir``
(required), ``local.key.prefix`` (default empty), ``local.fsync`` (default true).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import secrets
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, ClassVar

from storage_core.atomic_file import fsync_directory
from storage_core.tiered.remote_object_keys import (
    RemoteObjectSuffix,
    check_bucket_manifest_key,
    check_keys_to_delete,
    normalize_prefix,
    segment_key,
    segment_keys,
)
from storage_core.tiered.remote_storage_manager import (
    RSM_CONFIG_PREFIX,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadataLike,
    RemoteObjectInfo,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
    check_positions,
    check_restore_target,
    refuse_unknown_rsm_config,
)

logger = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
COPY_CHUNK_BYTES = 1 << 20


def strip_rsm_prefix(config: Mapping[str, str]) -> dict[str, str]:
    """``rsm.config.x`` and ``x`` both become ``x`` (the prefixed key wins)."""
    plain = {k: v for k, v in config.items() if not k.startswith(RSM_CONFIG_PREFIX)}
    plain.update(
        {
            k[len(RSM_CONFIG_PREFIX) :]: v
            for k, v in config.items()
            if k.startswith(RSM_CONFIG_PREFIX)
        }
    )
    return plain


class _FileRange(io.RawIOBase):
    """``length`` bytes of an open file from its current position; owns the file."""

    def __init__(self, file: BinaryIO, length: int, path: str) -> None:
        self._file = file
        self._remaining = length
        self._path = path

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._remaining <= 0:
            return 0
        view = memoryview(buffer)[: min(len(buffer), self._remaining)]
        try:
            count = self._file.readinto(view)  # type: ignore[attr-defined]
        except OSError as exc:
            raise RemoteStorageError(f"reading remote object {self._path} failed: {exc}") from exc
        if not count:
            raise RemoteStorageError(
                f"remote object {self._path} ended {self._remaining} bytes early"
                " (it was truncated after the fetch began)"
            )
        self._remaining -= count
        return int(count)

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


class LocalTieredStorage:
    """A ``RemoteStorageManager`` over a local directory (layout in the module docstring).

    Thread safety: every call may run concurrently with any other; writers of one segment
    id use distinct temp files and the last rename wins (both hold the same bytes).
    """

    def __init__(self, storage_dir: Path, *, prefix: str = "", fsync: bool = True) -> None:
        self.storage_dir = Path(storage_dir)
        self._root = str(self.storage_dir)
        self.prefix = normalize_prefix(prefix)
        self._fsync = fsync
        self.storage_dir.mkdir(parents=True, exist_ok=True)

    CONFIG_KEYS: ClassVar[frozenset[str]] = frozenset(
        {"local.storage.dir", "local.key.prefix", "local.fsync"}
    )

    @staticmethod
    def from_config(config: Mapping[str, str]) -> LocalTieredStorage:
        """Refuses keys it does not read (``UnknownRemoteStorageConfigError``)."""
        refuse_unknown_rsm_config("LocalTieredStorage", config, LocalTieredStorage.CONFIG_KEYS)
        plain = strip_rsm_prefix(config)
        storage_dir = plain.get("local.storage.dir")
        if not storage_dir:
            raise ValueError("rsm.config.local.storage.dir is required for LocalTieredStorage")
        fsync_text = plain.get("local.fsync", "true").strip().lower()
        if fsync_text not in ("true", "false"):
            raise ValueError(f"rsm.config.local.fsync must be true or false, got {fsync_text!r}")
        return LocalTieredStorage(
            Path(storage_dir), prefix=plain.get("local.key.prefix", ""), fsync=fsync_text == "true"
        )

    def __repr__(self) -> str:
        return f"LocalTieredStorage({self.storage_dir}, prefix={self.prefix!r})"

    def _path(self, segment: RemoteSegmentRef, suffix: RemoteObjectSuffix) -> str:
        """One object's path, for a read: one, not the seven ``_paths`` builds, and as text
        (a key holds several directories, which a ``Path`` would parse again on each read)."""
        return f"{self._root}/{segment_key(self.prefix, segment, suffix)}"

    def _paths(self, segment: RemoteSegmentRef) -> dict[RemoteObjectSuffix, Path]:
        return {
            suffix: self.storage_dir / key
            for suffix, key in segment_keys(self.prefix, segment).items()
        }

    # -- copy ---------------------------------------------------------------------------------

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        log_segment_data: LogSegmentData,
    ) -> bytes | None:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        paths = self._paths(segment)
        sources: dict[RemoteObjectSuffix, Path | bytes | None] = {
            RemoteObjectSuffix.LOG: log_segment_data.log_segment,
            RemoteObjectSuffix.OFFSET_INDEX: log_segment_data.offset_index,
            RemoteObjectSuffix.TIME_INDEX: log_segment_data.time_index,
            RemoteObjectSuffix.PRODUCER_SNAPSHOT: log_segment_data.producer_snapshot,
            RemoteObjectSuffix.TRANSACTION_INDEX: log_segment_data.transaction_index,
            RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT: log_segment_data.leader_epoch_index,
        }
        directory = paths[RemoteObjectSuffix.LOG].parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RemoteStorageError(f"cannot create remote directory {directory}: {exc}") from exc
        total_bytes = 0
        for suffix, source in sources.items():
            if source is None:
                continue
            total_bytes += self._write_object(paths[suffix], source)
        self._fsync_directory(directory)
        if log_segment_data.segment_manifest is not None:
            # Last, once every other object is durable: a manifest names a complete segment.
            manifest = log_segment_data.segment_manifest
            total_bytes += self._write_object(paths[RemoteObjectSuffix.SEGMENT_MANIFEST], manifest)
            self._fsync_directory(directory)
        logger.info(
            "copied remote segment partition=%s-%d segment_id=%s start_offset=%d bytes=%d dir=%s",
            segment.topic,
            segment.partition,
            segment.segment_id,
            segment.start_offset,
            total_bytes,
            directory,
        )
        return None

    def _fsync_directory(self, directory: Path) -> None:
        if not self._fsync:
            return
        try:
            fsync_directory(directory)
        except OSError as exc:
            raise RemoteStorageError(f"cannot fsync remote directory {directory}: {exc}") from exc

    def _write_object(self, target: Path, source: Path | bytes) -> int:
        """Write ``source`` (a file or bytes) to ``target`` atomically; returns its size."""
        temp = target.with_name(f"{target.name}.{secrets.token_hex(8)}{TEMP_SUFFIX}")
        try:
            with open(temp, "wb") as out:
                if isinstance(source, bytes):
                    out.write(source)
                    expected = written = len(source)
                else:
                    with open(source, "rb") as src:
                        expected = os.fstat(src.fileno()).st_size
                        written = _copy_bounded(src, out, expected)
                out.flush()
                if self._fsync:
                    os.fsync(out.fileno())
            if written != expected:
                raise RemoteStorageError(
                    f"copy of {source!r:.200} to {target} wrote {written} bytes, expected"
                    f" {expected} (the source changed during the copy)"
                )
            os.replace(temp, target)
            stored = target.stat().st_size
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            raise RemoteStorageError(
                f"copy of {source if isinstance(source, Path) else 'bytes'} to {target} failed:"
                f" {exc}"
            ) from exc
        except RemoteStorageError:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            raise
        if stored != expected:
            raise RemoteStorageError(
                f"remote object {target} holds {stored} bytes after the copy, expected {expected}"
            )
        return expected

    # -- fetch --------------------------------------------------------------------------------

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        check_positions(start_position, end_position)
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        return self._open(self._path(segment, RemoteObjectSuffix.LOG), start_position, end_position)

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike, index_type: IndexType
    ) -> BinaryIO:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        path = self._path(segment, RemoteObjectSuffix.for_index(index_type))
        return self._open(path, 0, None)

    def fetch_segment_manifest(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> bytes | None:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        path = self._path(segment, RemoteObjectSuffix.SEGMENT_MANIFEST)
        try:
            with open(path, "rb") as file:
                return file.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RemoteStorageError(f"cannot read remote object {path}: {exc}") from exc

    def _open(self, path: str, start_position: int, end_position: int | None) -> BinaryIO:
        try:
            file = open(path, "rb")  # noqa: SIM115 (owned by the returned stream)
        except FileNotFoundError as exc:
            raise RemoteResourceNotFoundError(f"remote object {path} does not exist") from exc
        except OSError as exc:
            raise RemoteStorageError(f"cannot open remote object {path}: {exc}") from exc
        try:
            size = os.fstat(file.fileno()).st_size
            if start_position > 0 and start_position >= size:
                raise RemoteStorageError(
                    f"start position {start_position} is beyond remote object {path}"
                    f" of {size} bytes"
                )
            end = size - 1 if end_position is None else min(end_position, size - 1)
            file.seek(start_position)
        except BaseException:
            file.close()
            raise
        return io.BufferedReader(_FileRange(file, end - start_position + 1, path))

    # -- delete -------------------------------------------------------------------------------

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> None:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        paths = self._paths(segment)
        directory = paths[RemoteObjectSuffix.LOG].parent
        deleted = 0
        # The manifest goes first: a deletion cut short leaves objects without one, which
        # nothing reads back (a restore skips them, reconcile removes them), never a manifest
        # naming objects that are gone.
        manifest = paths.pop(RemoteObjectSuffix.SEGMENT_MANIFEST)
        try:
            with contextlib.suppress(FileNotFoundError):
                manifest.unlink()
                deleted += 1
                if self._fsync:
                    fsync_directory(directory)
            for path in paths.values():
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    deleted += 1
            if directory.is_dir():
                # Temp files of copies of this segment interrupted by a crash.
                stem = paths[RemoteObjectSuffix.LOG].name.rsplit(".", 1)[0]
                for leftover in directory.glob(f"{stem}.*{TEMP_SUFFIX}"):
                    with contextlib.suppress(FileNotFoundError):
                        leftover.unlink()
                if self._fsync:
                    fsync_directory(directory)
        except OSError as exc:
            raise RemoteStorageError(
                f"deleting remote segment {segment} under {directory} failed: {exc}"
            ) from exc
        logger.info(
            "deleted remote segment partition=%s-%d segment_id=%s objects=%d",
            segment.topic,
            segment.partition,
            segment.segment_id,
            deleted,
        )

    def delete_objects(self, keys: Sequence[str]) -> None:
        """``RemoteObjectStore.delete_objects``: unlink the files of ``keys`` (checked first),
        then fsync their directories."""
        checked = check_keys_to_delete(keys, self.prefix, repr(self))
        directories: set[Path] = set()
        deleted = 0
        for key in checked:
            path = self.storage_dir / key
            try:
                path.unlink()
                deleted += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise RemoteStorageError(
                    f"deleting remote object {key} under {self.storage_dir} failed: {exc};"
                    f" {deleted} of {len(checked)} object(s) were deleted before, the others"
                    " remain: delete them again"
                ) from exc
            directories.add(path.parent)
        if self._fsync:
            for directory in sorted(d for d in directories if d.is_dir()):
                fsync_directory(directory)
        logger.info(
            "deleted remote objects dir=%s keys=%d objects=%d",
            self.storage_dir,
            len(checked),
            deleted,
        )

    # -- whole objects by key (topic manifests, offsets backups) ----------------------------

    def put_object(self, key: str, data: bytes) -> None:
        """``RemoteObjectStore.put_object``: a temp file beside the object, fsynced, renamed
        over it, the directory fsynced."""
        target = self.storage_dir / check_bucket_manifest_key(key, self.prefix, repr(self))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RemoteStorageError(
                f"cannot create remote directory {target.parent}: {exc}"
            ) from exc
        self._write_object(target, bytes(data))
        self._fsync_directory(target.parent)
        logger.info("wrote remote object key=%s bytes=%d dir=%s", key, len(data), self.storage_dir)

    def get_object(self, key: str) -> bytes:
        """``RemoteObjectStore.get_object``."""
        path = self.storage_dir / check_bucket_manifest_key(key, self.prefix, repr(self))
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise RemoteResourceNotFoundError(f"remote object {path} does not exist") from exc
        except OSError as exc:
            raise RemoteStorageError(f"cannot read remote object {path}: {exc}") from exc

    # -- restore (a copied segment's objects under another topic id) ------------------------

    def restore_segment_objects(
        self,
        source: RemoteSegmentRef,
        target: RemoteSegmentRef,
        suffixes: Sequence[RemoteObjectSuffix],
        manifest: bytes,
    ) -> int:
        """``RemoteObjectStore.restore_segment_objects``: each object copied as stored (a temp
        file fsynced and renamed), the directory fsynced, then the manifest the same way."""
        check_restore_target(source, target)
        sources, targets = self._paths(source), self._paths(target)
        directory = targets[RemoteObjectSuffix.LOG].parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RemoteStorageError(f"cannot create remote directory {directory}: {exc}") from exc
        stored = 0
        for suffix in suffixes:
            if not sources[suffix].exists():
                raise RemoteResourceNotFoundError(f"remote object {sources[suffix]} does not exist")
            stored += self._write_object(targets[suffix], sources[suffix])
        self._fsync_directory(directory)
        stored += self._write_object(targets[RemoteObjectSuffix.SEGMENT_MANIFEST], manifest)
        self._fsync_directory(directory)
        logger.info(
            "restored remote segment objects source=%s target=%s objects=%d bytes=%d",
            source.segment_id,
            target,
            len(suffixes) + 1,
            stored,
        )
        return stored

    # -- listing (reconcile, quality) -------------------------------------------------------

    def list_objects(self, prefix: str | None = None) -> Iterator[RemoteObjectInfo]:
        """``RemoteObjectStore.list_objects``: every complete object whose key starts with
        ``prefix`` (default: this storage's key prefix), in key order; keys parse with
        ``parse_object_key(key, self.prefix)``. A directory that can not be read raises
        ``RemoteStorageError`` (never a partial listing)."""
        key_prefix = self.prefix if prefix is None else prefix
        # Walk from the deepest directory that the prefix names completely.
        walk_root = self.storage_dir / key_prefix.rpartition("/")[0]
        if not walk_root.is_dir():
            return
        found: list[RemoteObjectInfo] = []

        def fail(exc: OSError) -> None:
            raise RemoteStorageError(
                f"listing remote objects under {walk_root} failed: {exc}; check the directory"
                " (local.storage.dir) and its permissions"
            ) from exc

        for dirpath, dirnames, filenames in os.walk(walk_root, onerror=fail):
            dirnames.sort()
            for name in filenames:
                if name.endswith(TEMP_SUFFIX):
                    continue
                path = Path(dirpath) / name
                key = path.relative_to(self.storage_dir).as_posix()
                if not key.startswith(key_prefix):
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                found.append(
                    RemoteObjectInfo(
                        key=key,
                        size_bytes=stat.st_size,
                        last_modified_ms=stat.st_mtime_ns // 1_000_000,
                    )
                )
        yield from sorted(found, key=lambda info: info.key)

    def close(self) -> None:
        """Nothing to release."""


def _copy_bounded(src: BinaryIO, out: BinaryIO, expected: int) -> int:
    """Copy at most ``expected`` bytes plus one (to notice a growing source)."""
    written = 0
    while written <= expected:
        chunk = src.read(min(COPY_CHUNK_BYTES, expected + 1 - written))
        if not chunk:
            break
        out.write(chunk)
        written += len(chunk)
    return written
