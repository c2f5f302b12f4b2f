"""Dumping objects of a remote segment: a path in a local-directory store
(``LocalTieredStorage``) or ``s3://<bucket>/<key>`` of an S3 store (``dump_s3_object``: read
through the chunked manager the ``rsm.config.*`` settings build, which checks and restores
the chunks the same way).

A remote object's path ends ``<topic>-<topicId>/<partition>/<base offset>-<segmentId>.<suffix>``
(``storage_core.tiered.remote_object_keys``). When the segment's ``rsm-manifest`` lies beside
it, the segment was copied in the chunked format: each chunk of the ``.log`` is checked
(CRC32C, AES-GCM tag) and restored (decrypted with the data key the key ring unwraps,
decompressed) into a scratch file, and the other objects likewise; the restored file is then
dumped exactly as a local one (``dump_log.dump_path``), its rows naming the remote path. A
remote object without a manifest (the plain format) is dumped as it is.

``.rsm-manifest`` itself prints as one row: format, version, chunk size and count, sizes,
compression and the id of the key pair that wraps the data key. Nothing secret is printed:
no data key, wrapped or not, no AAD.

A chunk that fails its checks ends the ``.log``'s batches with an ``error`` row naming the
chunk: the batches before it are printed, nothing after it (as the broker serves nothing
past it). An encrypted segment whose key pair the ring lacks is a
``MissingEncryptionKeyError`` naming the key id.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from storage_core.errors import InvalidConfigError
from storage_core.log import log_file_utils as files
from storage_core.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILENAME
from storage_core.tiered.chunked.chunk_transform import ChunkTransform, SegmentEncryption
from storage_core.tiered.chunked.chunked_storage_manager import (
    ChunkedRemoteStorageManager as Chunked,
)
from storage_core.tiered.chunked.errors import (
    ChunkIntegrityError,
    MissingEncryptionKeyError,
    SegmentManifestError,
)
from storage_core.tiered.chunked.format_config import ChunkedFormatConfig, split_format_config
from storage_core.tiered.chunked.key_ring import KeyRing
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectKey,
    RemoteObjectSuffix,
    parse_object_key,
)
from storage_core.tiered.remote_storage_manager import (
    RSM_CONFIG_PREFIX,
    IndexType,
    RemoteStorageError,
    RemoteStorageManager,
)
from storage_core.tools.dump_log import Row, dump_path
from storage_core.tools.key_values import rsm_settings

_KEY_PARTS = 3  # <topic>-<topicId>/<partition>/<file>
S3_SCHEME = "s3://"
COPY_BYTES = 1 << 20
_INDEX_TYPES = {RemoteObjectSuffix.for_index(index_type): index_type for index_type in IndexType}
_LOCAL_NAMES = {
    RemoteObjectSuffix.LOG: files.LOG_FILE_SUFFIX,
    RemoteObjectSuffix.OFFSET_INDEX: files.INDEX_FILE_SUFFIX,
    RemoteObjectSuffix.TIME_INDEX: files.TIME_INDEX_FILE_SUFFIX,
    RemoteObjectSuffix.TRANSACTION_INDEX: files.TXN_INDEX_FILE_SUFFIX,
}


def key_ring_from_settings(
    broker_config_path: Path | None, rsm_config: Sequence[str]
) -> KeyRing | None:
    """The key ring of the broker config's ``rsm.config.*`` settings with ``--rsm-config``
    on top (``storage-core tier``'s rule); ``InvalidConfigError`` naming the setting."""
    from storage_core.server.kafka_config import KafkaConfig  # noqa: PLC0415 (a heavy import)

    broker_config = None if broker_config_path is None else KafkaConfig.load(broker_config_path)
    try:
        _, config = rsm_settings(broker_config, None, rsm_config)
        format_settings, _ = split_format_config(config)
        return ChunkedFormatConfig.from_settings(format_settings).key_ring
    except ValueError as exc:
        raise InvalidConfigError(f"cannot build the key ring: {exc}") from None


def remote_object_of(path: Path) -> RemoteObjectKey | None:
    """The segment and suffix a remote object's path names, or ``None`` (a local file)."""
    if len(path.parts) < _KEY_PARTS:
        return None
    try:
        return parse_object_key("/".join(path.parts[-_KEY_PARTS:]))
    except InvalidRemoteObjectKeyError:
        return None


def manifest_path_of(path: Path) -> Path:
    return path.with_name(
        path.name.split(".", 1)[0] + "." + RemoteObjectSuffix.SEGMENT_MANIFEST.value
    )


def dump_remote_path(
    path: Path,
    key: RemoteObjectKey,
    *,
    key_ring: KeyRing | None,
    print_data: bool = False,
    verify_index: bool = False,
) -> Iterator[Row]:
    """Rows of one remote object (see the module docstring)."""
    manifest_path = manifest_path_of(path)
    if not manifest_path.is_file():
        yield from dump_path(path, print_data=print_data, verify_index=verify_index)
        return
    manifest = SegmentManifest.from_bytes(
        manifest_path.read_bytes(), where=f"{manifest_path} of remote segment {key.segment}"
    )
    if key.suffix is RemoteObjectSuffix.SEGMENT_MANIFEST:
        yield _manifest_row(path, manifest)
        return
    where = f"remote segment {key.segment}"
    transform = segment_transform(manifest, key_ring, where=where)
    with tempfile.TemporaryDirectory(prefix="dump-remote-") as scratch:
        directory = Path(scratch)
        restored = _restored_path(directory, key)
        if restored is None:
            yield from _not_dumped(str(path), key)
            return
        failure = None
        if key.suffix is RemoteObjectSuffix.LOG:
            failure = _restore_log(path, manifest, transform, restored, where)
        else:
            _restore_object(path, key.suffix, manifest, transform, restored, where)
            if key.suffix is RemoteObjectSuffix.OFFSET_INDEX and verify_index:
                log_object = path.with_name(path.name.split(".", 1)[0] + ".log")
                failure = _restore_log(
                    log_object, manifest, transform, _log_path(directory, key), where
                )
        yield from _rows_of_restored(
            str(path), restored, manifest, failure, print_data=print_data, verify_index=verify_index
        )


def dump_s3_object(
    url: str,
    *,
    broker_config_path: Path | None,
    rsm_config: Sequence[str],
    print_data: bool = False,
    verify_index: bool = False,
) -> Iterator[Row]:
    """Rows of one object of an S3 store, ``s3://<bucket>/<key>``, read through the
    chunked manager built from the broker config's ``rsm.config.*`` settings (endpoint,
    prefix, key ring) with ``--rsm-config`` on top, the bucket the URL's; the object
    restored as for ``dump_remote_path`` (a plain one as it is)."""
    from storage_core.server.kafka_config import KafkaConfig  # noqa: PLC0415 (a heavy import)
    from storage_core.tiered.rsm_loader import load_remote_storage_manager  # noqa: PLC0415

    bucket, _, object_key = url.removeprefix(S3_SCHEME).partition("/")
    if not bucket or not object_key:
        raise InvalidConfigError(f"{url} is not s3://<bucket>/<key>")
    broker_config = None if broker_config_path is None else KafkaConfig.load(broker_config_path)
    _, settings = rsm_settings(broker_config, "S3RemoteStorageManager", rsm_config)
    settings[f"{RSM_CONFIG_PREFIX}s3.bucket.name"] = bucket
    # A tool reads each chunk once: no disk cache (the broker's directory), no prefetch.
    for name in ("class", "path", "prefetch.max.size"):
        settings.pop(f"{RSM_CONFIG_PREFIX}fetch.chunk.cache.{name}", None)
    prefix = settings.get(f"{RSM_CONFIG_PREFIX}s3.key.prefix", "")
    try:
        key = parse_object_key(object_key, prefix)
    except InvalidRemoteObjectKeyError as exc:
        raise InvalidConfigError(f"{url}: not an object of a remote segment ({exc})") from None
    rsm = load_remote_storage_manager("S3RemoteStorageManager", settings)
    try:
        manifest = rsm.segment_manifest(key.segment) if isinstance(rsm, Chunked) else None
        if key.suffix is RemoteObjectSuffix.SEGMENT_MANIFEST:
            if manifest is None:
                raise InvalidConfigError(f"{url}: the segment has no manifest (plain format)")
            yield _manifest_row(url, manifest)
            return
        with tempfile.TemporaryDirectory(prefix="dump-remote-") as scratch:
            directory = Path(scratch)
            restored = _restored_path(directory, key)
            if restored is None:
                yield from _not_dumped(url, key)
                return
            failure = None
            if key.suffix is RemoteObjectSuffix.LOG:
                failure = _fetch_log(rsm, key, restored)
            else:
                index_type = _INDEX_TYPES[key.suffix]
                with rsm.fetch_index(key.segment, index_type) as stream:
                    restored.write_bytes(stream.read())
                if key.suffix is RemoteObjectSuffix.OFFSET_INDEX and verify_index:
                    failure = _fetch_log(rsm, key, _log_path(directory, key))
            yield from _rows_of_restored(
                url, restored, manifest, failure, print_data=print_data, verify_index=verify_index
            )
    finally:
        rsm.close()


def _fetch_log(
    rsm: RemoteStorageManager, key: RemoteObjectKey, target: Path
) -> RemoteStorageError | None:
    """The original ``.log`` into ``target`` up to the first failure (returned)."""
    with open(target, "wb") as out:
        try:
            with rsm.fetch_log_segment(key.segment, 0) as stream:
                # read1: what the stream holds now (a chunk's bytes), so that the chunks
                # before a bad one are written before it raises
                read = getattr(stream, "read1", stream.read)
                while block := read(COPY_BYTES):
                    out.write(block)
        except (ChunkIntegrityError, SegmentManifestError) as exc:
            return exc
    return None


def _restored_path(directory: Path, key: RemoteObjectKey) -> Path | None:
    """Where the restored object goes, named as the local file (``None``: not dumped)."""
    if key.suffix is RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT:
        return directory / LEADER_EPOCH_CHECKPOINT_FILENAME
    local_suffix = _LOCAL_NAMES.get(key.suffix)
    if local_suffix is None:
        return None
    return directory / (files.filename_prefix_from_offset(key.segment.start_offset) + local_suffix)


def _log_path(directory: Path, key: RemoteObjectKey) -> Path:
    return directory / (
        files.filename_prefix_from_offset(key.segment.start_offset) + files.LOG_FILE_SUFFIX
    )


def _not_dumped(shown: str, key: RemoteObjectKey) -> Iterator[Row]:
    yield {"type": "file", "file": shown}
    yield {"type": "error", "file": shown, "error": f".{key.suffix.value} objects are not dumped"}


def _rows_of_restored(
    shown: str,
    restored: Path,
    manifest: SegmentManifest | None,
    failure: Exception | None,
    *,
    print_data: bool,
    verify_index: bool,
) -> Iterator[Row]:
    for row in dump_path(restored, print_data=print_data, verify_index=verify_index):
        out = dict(row)
        if out.get("file") == str(restored):
            out["file"] = shown
        if out["type"] == "file" and manifest is not None:
            out.update(_format_fields(manifest))
        yield out
    if failure is not None:
        yield {"type": "error", "file": shown, "error": str(failure)}


def segment_transform(
    manifest: SegmentManifest, key_ring: KeyRing | None, *, where: str
) -> ChunkTransform:
    """The transformation that restores the segment's objects; ``MissingEncryptionKeyError``
    naming the key id when the ring cannot unwrap the data key."""
    encryption = None
    if manifest.encryption is not None:
        key_id = manifest.encryption.wrapped_data_key.key_id
        if key_ring is None:
            raise MissingEncryptionKeyError(
                f"{where} is encrypted with a data key wrapped by key pair {key_id!r} and no"
                f" key ring is configured: pass --rsm-config encryption.key.pairs={key_id}"
                f" --rsm-config encryption.key.pairs.{key_id}.public.key.file=PEM"
                f" --rsm-config encryption.key.pairs.{key_id}.private.key.file=PEM"
                " (or --broker-config with those rsm.config.* settings)"
            )
        data_key = key_ring.unwrap(manifest.encryption.wrapped_data_key, segment=where)
        encryption = SegmentEncryption(data_key, manifest.encryption.aad)
    return ChunkTransform(compression=manifest.compression, encryption=encryption)


def _restore_log(
    path: Path, manifest: SegmentManifest, transform: ChunkTransform, target: Path, where: str
) -> ChunkIntegrityError | None:
    """The original ``.log`` into ``target``, chunk by chunk, up to the first chunk that
    fails its checks (returned)."""
    index = manifest.chunk_index
    with open(path, "rb") as source, open(target, "wb") as out:
        for chunk_id in range(len(index)):
            chunk = index.chunk(chunk_id)
            chunk_where = (
                f"{where} .log chunk {chunk.id} (original bytes {chunk.original_position}"
                f"-{chunk.original_end - 1}) of {path}"
            )
            source.seek(chunk.stored_position)
            stored = source.read(chunk.stored_size)
            try:
                out.write(transform.restore_chunk(chunk, stored, where=chunk_where))
            except ChunkIntegrityError as exc:
                return exc
    return None


def _restore_object(  # noqa: PLR0917 - private, every argument named at its one call
    path: Path,
    suffix: RemoteObjectSuffix,
    manifest: SegmentManifest,
    transform: ChunkTransform,
    target: Path,
    where: str,
) -> None:
    digest = manifest.objects.get(suffix.value)
    if digest is None:
        raise ChunkIntegrityError(f"{where}: the manifest lists no .{suffix.value} object")
    target.write_bytes(
        transform.restore_object(
            suffix.value,
            path.read_bytes(),
            checksum=digest.checksum,
            where=f"{where} .{suffix.value} ({path})",
        )
    )


def _format_fields(manifest: SegmentManifest) -> Row:
    return {
        "format": "chunked",
        "compression": "zstd" if manifest.compression else "none",
        "encryption_key_id": None
        if manifest.encryption is None
        else manifest.encryption.wrapped_data_key.key_id,
    }


def _manifest_row(shown: Path | str, manifest: SegmentManifest) -> Row:
    index = manifest.chunk_index
    return {
        "type": "manifest",
        "file": str(shown),
        "version": manifest.version,
        **_format_fields(manifest),
        "chunk_size": index.chunk_size,
        "chunks": len(index),
        "frame_size": index.frame_size,
        "frames": len(index.stored_sizes),
        "original_size": index.original_size,
        "stored_size": index.stored_size,
        "objects": ",".join(sorted(manifest.objects)),
    }
