"""Integrity of S3 bodies: the checksums of what goes up, the length of what comes down.

``Digest`` is one body's checksum as S3 wants it sent (``x-amz-checksum-sha256`` or
``Content-MD5``) and shows it back; a multipart object's is ``composite_digest`` of its parts'.
``CheckedBody`` wraps a ``GetObject`` stream that must deliver exactly its announced length;
``check_read`` checks that a file read for upload gave the bytes expected.
"""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import botocore.exceptions

from storage_core.tiered.remote_storage_manager import RemoteStorageError
from storage_core.tiered.s3_remote_storage_config import MIB

STREAM_CHUNK_BYTES = MIB


class Digest:
    """The checksum of one body as S3 wants it sent and shows it back."""

    def __init__(self, algorithm: str, data: bytes) -> None:
        self.algorithm = algorithm
        if algorithm == "SHA256":
            self.raw = hashlib.sha256(data).digest()
        else:  # S3's Content-MD5 integrity check, not a security use
            self.raw = hashlib.md5(data, usedforsecurity=False).digest()
        self.b64 = base64.b64encode(self.raw).decode("ascii")

    def request_args(self) -> dict[str, str]:
        if self.algorithm == "SHA256":
            return {"ChecksumAlgorithm": "SHA256", "ChecksumSHA256": self.b64}
        return {"ContentMD5": self.b64}


def composite_digest(algorithm: str, digests: list[Digest]) -> Digest:
    """S3's checksum of a multipart object: the digest of the parts' concatenated digests."""
    return Digest(algorithm, b"".join(d.raw for d in digests))


class CheckedBody(io.RawIOBase):
    """A GetObject body that must deliver exactly ``length`` bytes; errors become
    ``RemoteStorageError``."""

    def __init__(self, body: Any, length: int, where: str) -> None:
        self._body = body
        self._remaining = length
        self._where = where

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._remaining <= 0:
            return 0
        want = min(len(buffer), self._remaining, STREAM_CHUNK_BYTES)
        try:
            chunk: bytes = self._body.read(want)
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            raise RemoteStorageError(f"reading {self._where} failed mid-stream: {exc}") from exc
        if not chunk:
            raise RemoteStorageError(
                f"{self._where} ended {self._remaining} bytes before its announced length"
            )
        memoryview(buffer)[: len(chunk)] = chunk
        self._remaining -= len(chunk)
        return len(chunk)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


def check_read(data: bytes, expected: int, path: Path) -> None:
    if len(data) != expected:
        raise RemoteStorageError(
            f"read {len(data)} bytes of {path}, expected {expected} (the file changed during"
            " the upload)"
        )
