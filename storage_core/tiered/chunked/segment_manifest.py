"""The segment manifest: the object written last beside a chunked segment's objects.

JSON (UTF-8), so that an operator can read it with any tool::

    {"format": "chunked", "version": 2,
     "chunkSize": 4194304, "frameSize": 262144, "originalSize": 10485760,
     "frames": {"storedSizes": [...], "checksums": [...]},      per frame, CRC32C of stored bytes
     "compression": "zstd" | null,
     "encryption": {"keyId": "k1", "wrappedDataKey": "<base64>", "aad": "<base64>"} | null,
     "objects": {"index": {"storedSize": 80, "checksum": 123}, ...},  the other objects
     "segment": {"metadata": "<base64>", "leaderEpochs": [[0, 0], [3, 1200]],
                 "topic": "orders", "topicId": "...", "partition": 3, "segmentId": "...",
                 "startOffset": 1200, "endOffset": 2399,
                 "abortedPastEnd": [{"producerId": 7, "firstOffset": 2390,
                                     "lastOffset": 2410, "lastStableOffset": 2390}],
                 "abortsClosedAtEnd": false}}

``segment`` makes the bucket self-describing (a restore reads a partition's log back from the
manifests alone): ``metadata`` is the segment's ``RemoteLogSegmentMetadata`` as the copy
started it, in Kafka's serde (the value of its COPY_SEGMENT_STARTED record in
``__remote_log_metadata``), and ``leaderEpochs`` the partition's leader-epoch entries up to the
segment's end (the ``leader-epoch-checkpoint`` object's, readable without its key). The other
fields repeat the metadata for a person reading the object. Manifests written before the
section existed have none (``segment`` is ``None``): they are read as before.

``abortedPastEnd`` lists the aborted transactions with records in the segment whose ABORT
markers lie beyond its end (in a later segment's transaction index, where Kafka keeps them);
absent when not known (copies made before it was recorded, segments rewritten from the tier).
A log restored up to this segment lacks those markers: the restore sets ``abortsClosedAtEnd``
on its last segment, and its transaction index is then served with those transactions closed
at the segment's end offset, so that read_committed consumers still skip their records. The
flag stays with the segment through later restores.

Version 1 (copies made before frames existed) has ``"chunks"`` instead of ``"frameSize"`` and
``"frames"``: each chunk is one frame. Both are read; a manifest written again (a restore's
``abortsClosedAtEnd``) keeps its version.

A segment without a manifest was copied in the plain format (the objects are the local files
as they were). A manifest of another format or of a later version is refused by name.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
from dataclasses import dataclass
from typing import Any

from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.log.transaction_index import AbortedTxn
from storage_core.tiered.chunked.chunk_index import ChunkIndex
from storage_core.tiered.chunked.errors import SegmentManifestError
from storage_core.tiered.chunked.key_ring import WrappedDataKey
from storage_core.tiered.metadata import RemoteLogSegmentMetadata, serde
from storage_core.tiered.metadata.errors import CorruptRemoteLogMetadataError

FORMAT_NAME = "chunked"
FORMAT_VERSION = 2  # written by new copies
UNFRAMED_VERSION = 1  # still read: one frame per chunk
COMPRESSION_ZSTD = "zstd"


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectDigest:
    """An object other than the ``.log`` as stored: its size and the CRC32C of its bytes."""

    stored_size: int
    checksum: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EncryptionMetadata:
    wrapped_data_key: WrappedDataKey
    aad: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentDescription:
    """What a restore needs to know of the segment without ``__remote_log_metadata``."""

    metadata: RemoteLogSegmentMetadata
    leader_epochs: tuple[EpochEntry, ...]
    aborted_past_end: tuple[AbortedTxn, ...] | None = None  # None: not known
    aborts_closed_at_end: bool = False

    def closing_aborts(self) -> tuple[AbortedTxn, ...]:
        """The transaction index entries the segment's own index lacks: ``aborted_past_end``
        closed at the segment's end offset when ``aborts_closed_at_end``, else none."""
        if not self.aborts_closed_at_end or not self.aborted_past_end:
            return ()
        end = self.metadata.end_offset
        return tuple(
            AbortedTxn(
                producer_id=txn.producer_id,
                first_offset=txn.first_offset,
                last_offset=end,
                last_stable_offset=min(txn.last_stable_offset, end + 1),
            )
            for txn in self.aborted_past_end
        )

    def to_json(self) -> dict[str, Any]:
        metadata = self.metadata
        segment_id = metadata.remote_log_segment_id
        tip = segment_id.topic_id_partition
        document: dict[str, Any] = {
            "metadata": _b64(serde.serialize(metadata)),
            "leaderEpochs": [[e.epoch, e.start_offset] for e in self.leader_epochs],
            "topic": tip.topic_partition.topic,
            "topicId": str(tip.topic_id),
            "partition": tip.topic_partition.partition,
            "segmentId": str(segment_id.id),
            "startOffset": metadata.start_offset,
            "endOffset": metadata.end_offset,
        }
        if self.aborted_past_end is not None:
            document["abortedPastEnd"] = [
                {
                    "producerId": txn.producer_id,
                    "firstOffset": txn.first_offset,
                    "lastOffset": txn.last_offset,
                    "lastStableOffset": txn.last_stable_offset,
                }
                for txn in self.aborted_past_end
            ]
        document["abortsClosedAtEnd"] = self.aborts_closed_at_end
        return document

    @staticmethod
    def from_json(document: object) -> SegmentDescription:
        if not isinstance(document, dict):
            raise TypeError("segment is not a JSON object")
        try:
            metadata = serde.deserialize(_unb64(document["metadata"]))
        except CorruptRemoteLogMetadataError as exc:
            raise ValueError(f"segment metadata: {exc}") from None
        if not isinstance(metadata, RemoteLogSegmentMetadata):
            raise ValueError(f"segment metadata is a {type(metadata).__name__}")
        epochs = document["leaderEpochs"]
        if not isinstance(epochs, list):
            raise TypeError("leaderEpochs is not a list")
        entries = []
        for pair in epochs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise TypeError(f"leader epoch entry {pair!r} is not [epoch, startOffset]")
            entries.append(EpochEntry(_int(pair[0]), _int(pair[1])))
        if any(
            a.epoch >= b.epoch or a.start_offset > b.start_offset
            for a, b in itertools.pairwise(entries)
        ):
            raise ValueError(f"leaderEpochs {epochs!r} do not increase")
        closed = document.get("abortsClosedAtEnd", False)
        if not isinstance(closed, bool):
            raise TypeError(f"abortsClosedAtEnd {closed!r} is not a boolean")
        return SegmentDescription(
            metadata=metadata,
            leader_epochs=tuple(entries),
            aborted_past_end=_aborted_txns(document.get("abortedPastEnd"), metadata),
            aborts_closed_at_end=closed,
        )


def _aborted_txns(
    listed: object, metadata: RemoteLogSegmentMetadata
) -> tuple[AbortedTxn, ...] | None:
    """``abortedPastEnd``: each transaction must have records in the segment and its marker
    beyond its end."""
    if listed is None:
        return None
    if not isinstance(listed, list):
        raise TypeError("abortedPastEnd is not a list")
    found = []
    for entry in listed:
        if not isinstance(entry, dict):
            raise TypeError(f"aborted transaction {entry!r} is not a JSON object")
        txn = AbortedTxn(
            producer_id=_int(entry["producerId"]),
            first_offset=_int(entry["firstOffset"]),
            last_offset=_int(entry["lastOffset"]),
            last_stable_offset=_int(entry["lastStableOffset"]),
        )
        if not txn.first_offset <= metadata.end_offset < txn.last_offset:
            raise ValueError(
                f"aborted transaction of producer {txn.producer_id} at"
                f" {txn.first_offset}..{txn.last_offset} does not run past the segment's end"
                f" {metadata.end_offset}"
            )
        found.append(txn)
    return tuple(found)


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentManifest:
    chunk_index: ChunkIndex
    compression: bool
    encryption: EncryptionMetadata | None
    objects: dict[str, ObjectDigest]  # by object suffix (``index``, ``timeindex``, ...)
    segment: SegmentDescription | None = None

    @property
    def version(self) -> int:
        return FORMAT_VERSION if self.chunk_index.framed else UNFRAMED_VERSION

    def to_bytes(self) -> bytes:
        index = self.chunk_index
        framing = {"frameSize": index.frame_size} if index.framed else {}
        document: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": self.version,
            "chunkSize": index.chunk_size,
            **framing,
            "originalSize": index.original_size,
            "frames" if index.framed else "chunks": {
                "storedSizes": list(index.stored_sizes),
                "checksums": list(index.checksums),
            },
            "compression": COMPRESSION_ZSTD if self.compression else None,
            "encryption": None
            if self.encryption is None
            else {
                "keyId": self.encryption.wrapped_data_key.key_id,
                "wrappedDataKey": _b64(self.encryption.wrapped_data_key.ciphertext),
                "aad": _b64(self.encryption.aad),
            },
            "objects": {
                name: {"storedSize": digest.stored_size, "checksum": digest.checksum}
                for name, digest in sorted(self.objects.items())
            },
        }
        if self.segment is not None:
            document["segment"] = self.segment.to_json()
        return json.dumps(document, separators=(",", ":")).encode()

    @staticmethod
    def from_bytes(data: bytes, *, where: str) -> SegmentManifest:
        """``SegmentManifestError`` naming ``where`` (the object) and what is wrong."""
        try:
            document = json.loads(data)
            if not isinstance(document, dict):
                raise TypeError("not a JSON object")
            if document.get("format") != FORMAT_NAME:
                raise ValueError(f"format {document.get('format')!r} is not {FORMAT_NAME!r}")
            version = document.get("version")
            if version not in (UNFRAMED_VERSION, FORMAT_VERSION):
                raise ValueError(
                    f"format version {version!r} is not one this broker reads"
                    f" ({UNFRAMED_VERSION} or {FORMAT_VERSION})"
                )
            framed = version == FORMAT_VERSION
            chunk_size = _int(document["chunkSize"])
            stored = document["frames" if framed else "chunks"]
            index = ChunkIndex(
                chunk_size=chunk_size,
                frame_size=_int(document["frameSize"]) if framed else chunk_size,
                framed=framed,
                original_size=_int(document["originalSize"]),
                stored_sizes=tuple(_int(size) for size in stored["storedSizes"]),
                checksums=tuple(_int(checksum) for checksum in stored["checksums"]),
            )
            compression = document["compression"]
            if compression not in (None, COMPRESSION_ZSTD):
                raise ValueError(f"unknown compression {compression!r}")
            encryption = document["encryption"]
            objects = {
                str(name): ObjectDigest(
                    stored_size=_int(digest["storedSize"]), checksum=_int(digest["checksum"])
                )
                for name, digest in document["objects"].items()
            }
            segment = document.get("segment")
            return SegmentManifest(
                chunk_index=index,
                compression=compression is not None,
                encryption=None
                if encryption is None
                else EncryptionMetadata(
                    wrapped_data_key=WrappedDataKey(
                        str(encryption["keyId"]), _unb64(encryption["wrappedDataKey"])
                    ),
                    aad=_unb64(encryption["aad"]),
                ),
                objects=objects,
                segment=None if segment is None else SegmentDescription.from_json(segment),
            )
        except (ValueError, TypeError, KeyError, AttributeError, binascii.Error) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise SegmentManifestError(
                f"segment manifest {where} is unreadable: {detail}"
            ) from None


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not an integer")
    return value


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: object) -> bytes:
    if not isinstance(text, str):
        raise TypeError(f"{text!r} is not base64 text")
    return base64.b64decode(text, validate=True)
