"""Compression codecs of record batches, in the framings Apache Kafka reads and writes.

The codec id sits in bits 0-2 of the batch attributes; the compressed stream replaces the
records section (everything after the 61-byte batch header)::

    0 none     records as they are
    1 gzip     one gzip stream (RFC 1952); concatenated members are read as one stream
    2 snappy   written in xerial framing, as Java clients do (org.xerial.snappy):
                   8 bytes   magic  0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
                   int32     version (1), big-endian
                   int32     compatible version (1), big-endian
                   ( int32 block length, big-endian | raw snappy block ) *
               each block compresses at most 32 KiB of input. Read: xerial framing, or a
               single raw snappy block when the magic is absent (what xerial falls back to).
    3 lz4      one LZ4 frame (lz4 frame format v1.5.1) as Kafka's KafkaLZ4BlockOutputStream
               writes it: magic 04 22 4D 18, FLG 0x60 (version 1, independent blocks, no
               checksums, no content size), BD 0x40 (64 KiB blocks), HC 0x82, then
               ( int32 little-endian block size | block ) * and a zero end mark. A block
               size with bit 31 set holds the block uncompressed. Read: any valid LZ4 frame.
    4 zstd     one or more zstd frames (RFC 8878)
    5-7        unused: ``UnsupportedCompressionError``

Every decompression is bounded by ``max_decompressed_bytes`` so that a small hostile batch
cannot expand into gigabytes (``DecompressedSizeLimitError``). Stateless and thread-safe.
"""

from __future__ import annotations

import enum
import mmap
import struct
from collections.abc import Callable
from typing import NoReturn, TypeAlias

import cramjam

from storage_core.errors import (
    CorruptRecordError,
    DecompressedSizeLimitError,
    UnsupportedCompressionError,
)

ByteBuffer: TypeAlias = bytes | bytearray | memoryview

# A batch is at most max.message.bytes (Kafka's default ~1 MiB); even a generous topic limit
# times a good compression ratio stays far below this.
DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

COMPRESSION_CODEC_MASK = 0x07


class CompressionType(enum.IntEnum):
    """Kafka's ``CompressionType``: the id stored in bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def display_name(self) -> str:
        """Kafka's name for the codec, as in ``compression.type``: ``none``, ``gzip``..."""
        return self.name.lower()

    @staticmethod
    def from_id(codec_id: int) -> CompressionType:
        """The codec with this attribute id; ``UnsupportedCompressionError`` for 5..7."""
        try:
            return _BY_ID[codec_id]
        except (IndexError, TypeError):
            raise UnsupportedCompressionError(
                f"unknown compression codec id {codec_id}: this engine reads none(0), gzip(1),"
                " snappy(2), lz4(3) and zstd(4); the batch was written by an unknown client"
            ) from None

    @staticmethod
    def from_name(name: str) -> CompressionType:
        """Parse Kafka's ``compression.type`` spelling (``none``, ``gzip``...)."""
        try:
            return CompressionType[name.upper()]
        except KeyError:
            raise UnsupportedCompressionError(
                f"unknown compression type {name!r}; use one of none, gzip, snappy, lz4, zstd"
            ) from None


_BY_ID: tuple[CompressionType, ...] = tuple(CompressionType)

# --------------------------------------------------------------------------------- snappy
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)
_XERIAL_BLOCK_BYTES = 32 * 1024
_INT32_BE = struct.Struct(">i")

# ------------------------------------------------------------------------------------ lz4
# Frame descriptor written by KafkaLZ4BlockOutputStream: FLG 0x60, BD 0x40, header checksum
# 0x82 (second byte of xxh32 over FLG and BD).
_LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_BLOCK_BYTES = 64 * 1024
_LZ4_UNCOMPRESSED_FLAG = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_UINT32_LE = struct.Struct("<I")

# The message of Rust's io::ErrorKind::WriteZero, raised by cramjam when the output buffer
# of ``decompress_into`` is full: here that means the size limit was reached.
_OUTPUT_FULL = "failed to write whole buffer"


def compress(compression: CompressionType, data: ByteBuffer) -> bytes:
    """Compress a records section with ``compression`` in Kafka's framing (see module doc)."""
    if compression == CompressionType.NONE:
        return bytes(data)
    if compression == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if compression == CompressionType.SNAPPY:
        return _snappy_xerial_compress(data)
    if compression == CompressionType.LZ4:
        return _lz4_kafka_frame_compress(data)
    if compression == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"cannot compress with unknown codec {compression!r}")


def decompress(
    compression: CompressionType,
    data: ByteBuffer,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Inverse of ``compress``; accepts any valid stream of the codec, not only ours.

    Raises ``CorruptRecordError`` when ``data`` is not a valid stream,
    ``DecompressedSizeLimitError`` when it expands beyond ``max_decompressed_bytes`` and
    ``UnsupportedCompressionError`` for an unknown codec.
    """
    if max_decompressed_bytes < 0:
        raise ValueError(f"max_decompressed_bytes must be >= 0, got {max_decompressed_bytes}")
    if compression == CompressionType.NONE:
        if len(data) > max_decompressed_bytes:
            _raise_limit(compression, max_decompressed_bytes)
        return bytes(data)
    if compression == CompressionType.SNAPPY:
        return _snappy_decompress(data, max_decompressed_bytes)
    if compression == CompressionType.GZIP:
        return _bounded_decompress(
            cramjam.gzip.decompress_into, compression, data, max_decompressed_bytes
        )
    if compression == CompressionType.LZ4:
        return _bounded_decompress(
            cramjam.lz4.decompress_into, compression, data, max_decompressed_bytes
        )
    if compression == CompressionType.ZSTD:
        return _bounded_decompress(
            cramjam.zstd.decompress_into, compression, data, max_decompressed_bytes
        )
    raise UnsupportedCompressionError(f"cannot decompress unknown codec {compression!r}")


def _raise_limit(compression: CompressionType, max_decompressed_bytes: int) -> NoReturn:
    raise DecompressedSizeLimitError(
        f"{compression.display_name} records expand beyond the limit of"
        f" {max_decompressed_bytes} bytes; the batch is hostile or the limit too small"
    )


def _bounded_decompress(
    decompress_into: Callable[[ByteBuffer, mmap.mmap], int],
    compression: CompressionType,
    data: ByteBuffer,
    limit: int,
) -> bytes:
    # An anonymous mapping one byte larger than the limit costs address space only; pages are
    # touched as output is written, and filling it completely means the limit was passed.
    with mmap.mmap(-1, limit + 1) as out:
        try:
            size = decompress_into(data, out)
        except (cramjam.DecompressionError, OSError, ValueError) as exc:
            if _OUTPUT_FULL in str(exc):
                _raise_limit(compression, limit)
            raise CorruptRecordError(
                f"cannot decompress {compression.display_name} records: {exc}"
            ) from None
        if size > limit:
            _raise_limit(compression, limit)
        return out[:size]


def _snappy_xerial_compress(data: ByteBuffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES])
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


def _snappy_decompress(data: ByteBuffer, limit: int) -> bytes:
    view = memoryview(data)
    if len(view) < _XERIAL_HEADER_SIZE or view[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return _snappy_raw_block(view, limit, limit)
    # Version and compatible version are not checked, as xerial and kafka-python do not.
    parts: list[bytes] = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"truncated xerial snappy block length at byte {pos} of {end}")
        (block_size,) = _INT32_BE.unpack_from(view, pos)
        pos += 4
        if block_size < 0 or block_size > end - pos:
            raise CorruptRecordError(
                f"xerial snappy block at byte {pos - 4} claims {block_size} bytes,"
                f" {end - pos} remain"
            )
        block = _snappy_raw_block(view[pos : pos + block_size], limit, limit - total)
        total += len(block)
        parts.append(block)
        pos += block_size
    return b"".join(parts)


def _snappy_raw_block(block: memoryview, limit: int, remaining: int) -> bytes:
    # A raw snappy block starts with its uncompressed length, which the decoder enforces.
    try:
        expected = cramjam.snappy.decompress_raw_len(block)
    except (cramjam.DecompressionError, OSError, ValueError) as exc:
        raise CorruptRecordError(f"cannot decompress snappy records: {exc}") from None
    if expected > remaining:
        _raise_limit(CompressionType.SNAPPY, limit)
    try:
        out = bytes(cramjam.snappy.decompress_raw(block))
    except (cramjam.DecompressionError, OSError, ValueError) as exc:
        raise CorruptRecordError(f"cannot decompress snappy records: {exc}") from None
    if len(out) != expected:
        raise CorruptRecordError(
            f"snappy block decompressed to {len(out)} bytes, its preamble says {expected}"
        )
    return out


def _lz4_kafka_frame_compress(data: ByteBuffer) -> bytes:
    view = memoryview(data)
    parts = [_LZ4_FRAME_HEADER]
    for start in range(0, len(view), _LZ4_BLOCK_BYTES):
        chunk = view[start : start + _LZ4_BLOCK_BYTES]
        block = cramjam.lz4.compress_block(chunk, store_size=False)
        if len(block) < len(chunk):
            parts.append(_UINT32_LE.pack(len(block)))
            parts.append(bytes(block))
        else:
            parts.append(_UINT32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_FLAG))
            parts.append(bytes(chunk))
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)
