"""Dumping objects of a remote segment in a local-directory store (``LocalTieredStorage``).

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
from storage_core.tiered.chunked.errors import ChunkIntegrityError, MissingEncryptionKeyError
from storage_core.tiered.chunked.format_config import ChunkedFormatConfig, split_format_config
from storage_core.tiered.chunked.key_ring import KeyRing
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectKey,
    RemoteObjectSuffix,
    parse_object_key,
)
from storage_core.tools.dump_log import Row, dump_path
from storage_core.tools.key_values import rsm_settings

_KEY_PARTS = 3  # <topic>-<topicId>/<partition>/<file>
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
    local_suffix = _LOCAL_NAMES.get(key.suffix)
    with tempfile.TemporaryDirectory(prefix="dump-remote-") as scratch:
        directory = Path(scratch)
        stem = files.filename_prefix_from_offset(key.segment.start_offset)
        if key.suffix is RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT:
            restored = directory / LEADER_EPOCH_CHECKPOINT_FILENAME
        elif local_suffix is not None:
            restored = directory / (stem + local_suffix)
        else:
            yield {"type": "file", "file": str(path)}
            yield {
                "type": "error",
                "file": str(path),
                "error": f".{key.suffix.value} objects are not dumped",
            }
            return
        failure = None
        if key.suffix is RemoteObjectSuffix.LOG:
            failure = _restore_log(path, manifest, transform, restored, where)
        else:
            _restore_object(path, key.suffix, manifest, transform, restored, where)
            if key.suffix is RemoteObjectSuffix.OFFSET_INDEX and verify_index:
                log_object = path.with_name(path.name.split(".", 1)[0] + ".log")
                failure = _restore_log(
                    log_object,
                    manifest,
                    transform,
                    directory / (stem + files.LOG_FILE_SUFFIX),
                    where,
                )
        for row in dump_path(restored, print_data=print_data, verify_index=verify_index):
            shown = dict(row)
            if shown.get("file") == str(restored):
                shown["file"] = str(path)
            if shown["type"] == "file":
                shown.update(_format_fields(manifest))
            yield shown
        if failure is not None:
            yield {"type": "error", "file": str(path), "error": str(failure)}


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
                if len(stored) != chunk.stored_size:
                    raise ChunkIntegrityError(
                        f"{chunk_where}: the object ends {chunk.stored_size - len(stored)}"
                        " bytes early (truncated?)"
                    )
                out.write(
                    transform.restore_chunk(
                        chunk.id,
                        stored,
                        checksum=chunk.checksum,
                        original_size=chunk.original_size,
                        where=chunk_where,
                    )
                )
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


def _manifest_row(path: Path, manifest: SegmentManifest) -> Row:
    index = manifest.chunk_index
    return {
        "type": "manifest",
        "file": str(path),
        "version": manifest.version,
        **_format_fields(manifest),
        "chunk_size": index.chunk_size,
        "chunks": len(index),
        "original_size": index.original_size,
        "stored_size": index.stored_size,
        "objects": ",".join(sorted(manifest.objects)),
    }
