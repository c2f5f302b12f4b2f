"""What happens to each chunk on its way to the store and back: zstd compression, then
AES-256-GCM encryption, then a CRC32C of the stored bytes; reading undoes it in reverse and
serves nothing that fails a check.

Encryption: every chunk gets a fresh 12-byte nonce stored in front of its ciphertext (then the
16-byte tag at its end); the authenticated data is the segment's random AAD followed by the
chunk number, so chunks of one segment cannot be swapped or moved into another segment
unnoticed. Index objects are encrypted the same way, with the object's suffix in place of the
chunk number.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import zstandard
from crc32c import crc32c
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage_core.records.batch import ATTRIBUTES_OFFSET, BATCH_HEADER_SIZE, MAGIC_OFFSET, MAGIC_V2
from storage_core.records.compression import COMPRESSION_CODEC_MASK
from storage_core.tiered.chunked.errors import ChunkIntegrityError

DATA_KEY_BYTES = 32  # AES-256
AAD_BYTES = 32
NONCE_BYTES = 12
ZSTD_LEVEL = 3
_CHUNK_NUMBER = struct.Struct(">q")


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

    def transform_chunk(self, chunk_id: int, data: bytes) -> bytes:
        if self.compression:
            data = zstandard.compress(data, ZSTD_LEVEL)
        return self._encrypt(data, _CHUNK_NUMBER.pack(chunk_id))

    def restore_chunk(
        self, chunk_id: int, stored: bytes, *, checksum: int, original_size: int, where: str
    ) -> bytes:
        """The original bytes of chunk ``chunk_id``; ``ChunkIntegrityError`` naming ``where``
        when the stored bytes fail their checksum, their tag, or decompress to another size."""
        if crc32c(stored) != checksum:
            raise ChunkIntegrityError(f"{where}: the stored chunk fails its CRC32C checksum")
        data = self._decrypt(stored, _CHUNK_NUMBER.pack(chunk_id), where)
        if self.compression:
            try:
                data = zstandard.decompress(data, max_output_size=original_size)
            except zstandard.ZstdError as exc:
                raise ChunkIntegrityError(
                    f"{where}: the chunk does not decompress: {exc}"
                ) from None
        if len(data) != original_size:
            raise ChunkIntegrityError(
                f"{where}: the chunk holds {len(data)} bytes, the manifest says {original_size}"
            )
        return data

    def transform_object(self, name: str, data: bytes) -> bytes:
        """An index object: encrypted when the segment is (never compressed: they are small)."""
        return self._encrypt(data, name.encode())

    def restore_object(self, name: str, stored: bytes, *, checksum: int, where: str) -> bytes:
        if crc32c(stored) != checksum:
            raise ChunkIntegrityError(f"{where}: the object fails its CRC32C checksum")
        return self._decrypt(stored, name.encode(), where)

    def _encrypt(self, data: bytes, context: bytes) -> bytes:
        if self._aes is None or self.encryption is None:
            return data
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aes.encrypt(nonce, data, self.encryption.aad + context)

    def _decrypt(self, stored: bytes, context: bytes, where: str) -> bytes:
        if self._aes is None or self.encryption is None:
            return stored
        try:
            return self._aes.decrypt(
                stored[:NONCE_BYTES], stored[NONCE_BYTES:], self.encryption.aad + context
            )
        except InvalidTag:
            raise ChunkIntegrityError(
                f"{where}: the chunk fails its AES-GCM authentication tag"
            ) from None


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
