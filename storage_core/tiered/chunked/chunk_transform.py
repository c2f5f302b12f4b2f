"""What happens to each frame of a chunk on its way to the store and back: zstd compression,
then AES-256-GCM encryption, then a CRC32C of the stored bytes; reading undoes it in reverse and
serves nothing that fails a check. A frame is checked on its own, so a reader that needs a few
bytes of a chunk reads and checks the frames holding them, not the whole chunk.

Encryption: every frame gets a fresh 12-byte nonce stored in front of its ciphertext (then the
16-byte tag at its end); the authenticated data is the segment's random AAD followed by the
frame's chunk and frame numbers (``Frame.context``), so frames of one segment cannot be
swapped or moved into another segment unnoticed. Index objects are encrypted the same way,
with the object's suffix in place of the numbers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zstandard
from crc32c import crc32c
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage_core.records.batch import ATTRIBUTES_OFFSET, BATCH_HEADER_SIZE, MAGIC_OFFSET, MAGIC_V2
from storage_core.records.compression import COMPRESSION_CODEC_MASK
from storage_core.tiered.chunked.chunk_index import Chunk, Frame
from storage_core.tiered.chunked.errors import ChunkIntegrityError

DATA_KEY_BYTES = 32  # AES-256
AAD_BYTES = 32
NONCE_BYTES = 12
ZSTD_LEVEL = 3


@dataclass(frozen=True, slots=True)
class SegmentEncryption:
    """A segment's data key and authenticated data (the manifest keeps both, the key wrapped)."""

    data_key: bytes
    aad: bytes

    @staticmethod
    def generate() -> SegmentEncryption:
        # Two separate random draws: the AAD must tell nothing about the key.
        return SegmentEncryption(AESGCM.generate_key(bit_length=256), os.urandom(AAD_BYTES))


class ChunkTransform:
    """The transformation of one segment's chunks (compression and/or encryption, or none)."""

    def __init__(self, *, compression: bool, encryption: SegmentEncryption | None) -> None:
        self.compression = compression
        self.encryption = encryption
        self._aes = None if encryption is None else AESGCM(encryption.data_key)

    @property
    def is_identity(self) -> bool:
        """Stored bytes equal the original ones."""
        return not self.compression and self.encryption is None

    def transform_frame(self, context: bytes, data: bytes) -> bytes:
        """The stored bytes of one frame (``context``: ``Frame.context``)."""
        if self.compression:
            data = zstandard.compress(data, ZSTD_LEVEL)
        return self._encrypt(data, context)

    def restore_chunk(self, chunk: Chunk, stored: bytes | memoryview, *, where: str) -> bytes:
        """The original bytes of ``chunk`` from its ``stored`` bytes; ``ChunkIntegrityError``
        naming ``where`` when a frame fails a check."""
        return self.restore_frames(chunk.frames, stored, where=where)

    def restore_frames(
        self, frames: tuple[Frame, ...], stored: bytes | memoryview, *, where: str
    ) -> bytes:
        """The original bytes of consecutive ``frames`` from their ``stored`` bytes."""
        view = memoryview(stored)
        base = frames[0].stored_position
        if self.is_identity:  # checked in place, served as stored: no copy
            for frame in frames:
                start = frame.stored_position - base
                self._check(frame, view[start : start + frame.stored_size], _where(where, frame))
            return stored if isinstance(stored, bytes) else bytes(stored)
        parts = [
            self.restore_frame(
                frame,
                view[
                    frame.stored_position - base : frame.stored_position - base + frame.stored_size
                ],
                where=_where(where, frame),
            )
            for frame in frames
        ]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def restore_frame(self, frame: Frame, stored: bytes | memoryview, *, where: str) -> bytes:
        """The original bytes of ``frame``; ``ChunkIntegrityError`` naming ``where`` when the
        stored bytes fail their checksum, their tag, or decompress to another size."""
        self._check(frame, stored, where)
        data = self._decrypt(stored, frame.context, where)
        if self.compression:
            try:
                data = zstandard.decompress(data, max_output_size=frame.original_size)
            except zstandard.ZstdError as exc:
                raise ChunkIntegrityError(
                    f"{where}: the chunk does not decompress: {exc}"
                ) from None
        if len(data) != frame.original_size:
            raise ChunkIntegrityError(
                f"{where}: the chunk holds {len(data)} bytes, the manifest says"
                f" {frame.original_size}"
            )
        return bytes(data) if isinstance(data, memoryview) else data

    @staticmethod
    def _check(frame: Frame, stored: bytes | memoryview, where: str) -> None:
        if len(stored) != frame.stored_size:
            raise ChunkIntegrityError(
                f"{where}: the object ends {frame.stored_size - len(stored)} bytes early"
                " (truncated?)"
            )
        if crc32c(stored) != frame.checksum:
            raise ChunkIntegrityError(f"{where}: the stored chunk fails its CRC32C checksum")

    def transform_object(self, name: str, data: bytes) -> bytes:
        """An index object: encrypted when the segment is (never compressed: they are small)."""
        return self._encrypt(data, name.encode())

    def restore_object(self, name: str, stored: bytes, *, checksum: int, where: str) -> bytes:
        if crc32c(stored) != checksum:
            raise ChunkIntegrityError(f"{where}: the object fails its CRC32C checksum")
        restored = self._decrypt(stored, name.encode(), where)
        return restored if isinstance(restored, bytes) else bytes(restored)

    def _encrypt(self, data: bytes, context: bytes) -> bytes:
        if self._aes is None or self.encryption is None:
            return data
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aes.encrypt(nonce, data, self.encryption.aad + context)

    def _decrypt(
        self, stored: bytes | memoryview, context: bytes, where: str
    ) -> bytes | memoryview:
        if self._aes is None or self.encryption is None:
            return stored
        try:
            return self._aes.decrypt(
                bytes(stored[:NONCE_BYTES]), stored[NONCE_BYTES:], self.encryption.aad + context
            )
        except InvalidTag:
            raise ChunkIntegrityError(
                f"{where}: the chunk fails its AES-GCM authentication tag"
            ) from None


def _where(where: str, frame: Frame) -> str:
    first, last = frame.original_position, frame.original_end - 1
    return f"{where} frame {frame.number} (original bytes {first}-{last})"


def checksum_of(stored: bytes) -> int:
    return crc32c(stored)


def segment_is_compressed(log_segment: Path) -> bool:
    """Whether the segment's first batch is compressed (the compression heuristic: a segment
    whose producers compress gains nothing from zstd on top)."""
    with open(log_segment, "rb") as file:
        header = file.read(BATCH_HEADER_SIZE)
    if len(header) < ATTRIBUTES_OFFSET + 2 or header[MAGIC_OFFSET] != MAGIC_V2:
        return False
    attributes = int.from_bytes(header[ATTRIBUTES_OFFSET : ATTRIBUTES_OFFSET + 2], "big")
    return attributes & COMPRESSION_CODEC_MASK != 0
