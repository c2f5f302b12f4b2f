"""The segment manifest: the object written last beside a chunked segment's objects.

JSON (UTF-8), so that an operator can read it with any tool::

    {"format": "chunked", "version": 3,
     "chunkSize": 4194304, "frameSize": 262144, "originalSize": 10485760,
     "frames": {"storedSizes": "<base64>", "checksums": "<base64>"},  per frame, CRC32C of stored
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

``frames`` holds one stored size and one checksum per frame, each list the base64 of
big-endian unsigned 32-bit integers: a 1 GiB segment has 4,096 frames, and reading them as
JSON numbers took 0.8 ms of every cold read of the segment (version 2, which wrote them so, is
still read). Version 1 (copies made before frames existed) has ``"chunks"`` instead of
``"frameSize"`` and ``"frames"``, as JSON numbers: each chunk is one frame. All three are read;
a manifest written again (a restore's ``abortsClosedAtEnd``) keeps its version.

A segment without a manifest was copied in the plain format (the objects are the local files
as they were). A manifest of another format or of a later version is refused by name.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.log.transaction_index import AbortedTxn
from storage_core.tiered.chunked.chunk_index import ChunkIndex
from storage_core.tiered.chunked.errors import SegmentManifestError
from storage_core.tiered.chunked.key_ring import WrappedDataKey
from storage_core.tiered.metadata import RemoteLogSegmentMetadata, serde
from storage_core.tiered.metadata.errors import CorruptRemoteLogMetadataError

FORMAT_NAME = "chunked"
FORMAT_VERSION = 3  # written by new copies
NUMBERS_VERSION = 2  # still read: the frames' sizes and checksums as JSON numbers
UNFRAMED_VERSION = 1  # still read: one frame per chunk, as JSON numbers
_READ_VERSIONS = (UNFRAMED_VERSION, NUMBERS_VERSION, FORMAT_VERSION)
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


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SegmentManifest:
    chunk_index: ChunkIndex
    compression: bool
    encryption: EncryptionMetadata | None
    objects: dict[str, ObjectDigest]  # by object suffix (``index``, ``timeindex``, ...)
    description: SegmentDescription | None = None  # read through ``segment``
    packed_frames: bool = True  # False: a version 2 manifest (read, and written again as it was)
    # The ``segment`` section as read, when ``from_bytes`` left it to ``segment`` to parse.
    description_document: object = field(default=None, repr=False, compare=False)
    where: str = field(default="", repr=False, compare=False)
    _parsed: SegmentDescription | None = field(default=None, init=False, repr=False, compare=False)

    def __eq__(self, other: object) -> bool:
        """Equal when they say the same, whether or not ``segment`` was parsed yet."""
        if not isinstance(other, SegmentManifest):
            return NotImplemented
        return self._said() == other._said()

    __hash__ = None  # type: ignore[assignment]  # mutable ``objects``, as the dataclass had

    def _said(self) -> tuple[object, ...]:
        return (
            self.chunk_index,
            self.compression,
            self.encryption,
            self.objects,
            self.packed_frames,
            self.segment,
        )

    @property
    def segment(self) -> SegmentDescription | None:
        """The segment's description (``None`` in manifests written before it existed),
        parsed when first asked for if ``from_bytes`` was told to leave it
        (``SegmentManifestError`` then, naming the object)."""
        if self.description is not None or self.description_document is None:
            return self.description
        parsed = self._parsed
        if parsed is None:
            parsed = _parse_description(self.description_document, self.where)
            object.__setattr__(self, "_parsed", parsed)
        return parsed

    @property
    def version(self) -> int:
        if not self.chunk_index.framed:
            return UNFRAMED_VERSION
        return FORMAT_VERSION if self.packed_frames else NUMBERS_VERSION

    def to_bytes(self) -> bytes:
        index = self.chunk_index
        framing = {"frameSize": index.frame_size} if index.framed else {}
        version = self.version
        encode = _pack_u32 if version == FORMAT_VERSION else list
        document: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": version,
            "chunkSize": index.chunk_size,
            **framing,
            "originalSize": index.original_size,
            "frames" if index.framed else "chunks": {
                "storedSizes": encode(index.stored_sizes),
                "checksums": encode(index.checksums),
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
        # Written again as it was read, unless a new description replaced it.
        described = self.description
        section = described.to_json() if described is not None else self.description_document
        if section is not None:
            document["segment"] = section
        return json.dumps(document, separators=(",", ":")).encode()

    @staticmethod
    def from_bytes(data: bytes, *, where: str, describe: bool = True) -> SegmentManifest:
        """``SegmentManifestError`` naming ``where`` (the object) and what is wrong.

        ``describe=False`` leaves the ``segment`` section unparsed until ``segment`` is first
        read: a read of records never needs it, and parsing it (the segment's metadata in
        Kafka's serde, its leader epochs) was half of every cold read's manifest."""
        try:
            document = json.loads(data)
            if not isinstance(document, dict):
                raise TypeError("not a JSON object")
            if document.get("format") != FORMAT_NAME:
                raise ValueError(f"format {document.get('format')!r} is not {FORMAT_NAME!r}")
            version = document.get("version")
            if version not in _READ_VERSIONS:
                raise ValueError(
                    f"format version {version!r} is not one this broker reads"
                    f" ({', '.join(map(str, _READ_VERSIONS))})"
                )
            framed = version != UNFRAMED_VERSION
            chunk_size = _int(document["chunkSize"])
            stored = document["frames" if framed else "chunks"]
            decode = _unpack_u32 if version == FORMAT_VERSION else _ints
            index = ChunkIndex(
                chunk_size=chunk_size,
                frame_size=_int(document["frameSize"]) if framed else chunk_size,
                framed=framed,
                original_size=_int(document["originalSize"]),
                stored_sizes=decode(stored["storedSizes"], "storedSizes"),
                checksums=decode(stored["checksums"], "checksums"),
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
                description=None
                if segment is None or not describe
                else _parse_description(segment, where),
                packed_frames=version == FORMAT_VERSION,
                description_document=None if describe else segment,
                where=where,
            )
        except _UNREADABLE as exc:
            raise _unreadable(where, exc) from None


_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, binascii.Error)


def _unreadable(where: str, exc: Exception) -> SegmentManifestError:
    detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
    return SegmentManifestError(f"segment manifest {where} is unreadable: {detail}")


def _parse_description(document: object, where: str) -> SegmentDescription:
    try:
        return SegmentDescription.from_json(document)
    except _UNREADABLE as exc:
        raise _unreadable(where, exc) from None


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not an integer")
    return value


def _ints(values: object, name: str) -> tuple[int, ...]:
    if not isinstance(values, list):
        raise TypeError(f"{name} is not a list")
    return tuple(_int(value) for value in values)


def _pack_u32(values: tuple[int, ...]) -> str:
    return _b64(struct.pack(f">{len(values)}I", *values))


def _unpack_u32(text: object, name: str) -> tuple[int, ...]:
    packed = _unb64(text)
    if len(packed) % 4:
        raise ValueError(f"{name} holds {len(packed)} bytes, not a whole number of 32-bit integers")
    return struct.unpack(f">{len(packed) // 4}I", packed)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: object) -> bytes:
    if not isinstance(text, str):
        raise TypeError(f"{text!r} is not base64 text")
    return base64.b64decode(text, validate=True)
