"""``S3RemoteStorageManager``: the remote tier in S3 or any S3-compatible store (boto3).

Objects and keys are those of ``remote_object_keys`` (one object per file of a segment) in
one bucket under a key prefix. Config (``rsm.config.`` prefix optional), with defaults::

    s3.bucket.name                  (required)
    s3.key.prefix                   ""        objects go to <prefix>/<topic>-<topicId>/...
    s3.region                       from the AWS chain (AWS_REGION, ~/.aws/config), else us-east-1
    s3.endpoint.url                 AWS       e.g. http://127.0.0.1:9000 for MinIO
    s3.path.style.access.enabled    false     true for most S3-compatible stores
    s3.multipart.threshold.bytes    33554432  files above this go up as multipart uploads
    s3.multipart.part.size.bytes    16777216  S3 wants >= 5 MiB (but the last part)
    s3.checksum.algorithm           SHA256    or MD5 (Content-MD5 + ETag, for stores without
                                              flexible checksums)
    s3.connect.timeout.ms           2000
    s3.read.timeout.ms              10000
    s3.retry.max.attempts           5         attempts per request, the first included
    s3.retry.backoff.ms             100       full-jitter exponential backoff: sleep
    s3.retry.backoff.max.ms         2000        uniform(0, min(max, base * 2^(attempt-1)))
    s3.retry.total.timeout.ms       20000     no new attempt starts after this

Credentials come from the standard AWS chain only (environment, shared files, SSO, instance
roles); the config never holds secrets.

Writes. A file of at most ``s3.multipart.threshold.bytes`` is one ``PutObject``; a larger one
is a multipart upload of ``s3.multipart.part.size.bytes`` parts (at most 10,000), aborted if
any step fails. Every body carries its checksum (``x-amz-checksum-sha256``, or
``Content-MD5``), computed here from the bytes read from disk, so the store rejects corrupted
bodies; after the upload a ``HeadObject`` must show the file's size and the expected checksum
(SHA-256 of the object, or for multipart the SHA-256 of the parts' SHA-256 digests, as S3
composes it; with MD5 the ETag, which is the MD5 only without SSE-KMS/SSE-C encryption).
Memory held per upload: one part or one small file.

Reads. ``fetch_log_segment`` is a ranged ``GetObject`` (``Range: bytes=start-end``, end
inclusive); the stream checks that it delivers exactly the announced length. Whole-object
reads ask for the stored checksum, which botocore verifies when the object has one.

Failures. botocore's own retries are off (one attempt per call) so that this class alone
bounds attempts and total time: connection errors, timeouts, throttling and 5xx answers are
retried with backoff; anything else fails at once. ``RemoteStorageError`` names the
operation, ``s3://bucket/key`` and the endpoint; a missing object raises
``RemoteResourceNotFoundError``.

Thread safety: all methods may be called concurrently (boto3 clients are thread-safe and
this class keeps no other mutable state).
"""

from __future__ import annotations

import functools
import io
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import boto3
import botocore.config
import botocore.exceptions

from storage_core.tiered.remote_object_keys import (
    RemoteObjectSuffix,
    check_bucket_manifest_key,
    check_keys_to_delete,
    segment_key,
    segment_keys,
)
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadataLike,
    RemoteObjectInfo,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
    check_positions,
    check_restore_target,
)
from storage_core.tiered.s3_integrity import CheckedBody, Digest, check_read, composite_digest
from storage_core.tiered.s3_remote_storage_config import DEFAULT_REGION, S3RemoteStorageConfig
from storage_core.tiered.s3_retries import call_with_retries, error_code

logger = logging.getLogger(__name__)

T = TypeVar("T")

S3_MAX_PARTS = 10_000
S3_DELETE_OBJECTS_KEYS_MAX = 1000


class S3RemoteStorageManager:
    """A ``RemoteStorageManager`` over one S3 bucket; behaviour in the module docstring."""

    def __init__(self, config: S3RemoteStorageConfig, *, session: Any = None) -> None:
        self.config = config
        self.prefix = config.key_prefix
        session = session or boto3.session.Session()
        client_config = botocore.config.Config(
            connect_timeout=config.connect_timeout_ms / 1000,
            read_timeout=config.read_timeout_ms / 1000,
            # One attempt per call: _call owns retries, so attempts and time stay bounded.
            retries={"mode": "standard", "total_max_attempts": 1},
            # Checksums are computed here from the bytes read from disk (module docstring).
            request_checksum_calculation="when_required",
            response_checksum_validation="when_supported",
            s3={"addressing_style": "path" if config.path_style_access else "auto"},
            user_agent_extra="storage-core-rsm",
        )
        self._client = session.client(
            "s3",
            region_name=config.region or session.region_name or DEFAULT_REGION,
            endpoint_url=config.endpoint_url,
            config=client_config,
        )
        self.endpoint_url: str = self._client.meta.endpoint_url

    @staticmethod
    def from_config(config: Mapping[str, str]) -> S3RemoteStorageManager:
        return S3RemoteStorageManager(S3RemoteStorageConfig.from_config(config))

    def __repr__(self) -> str:
        return (
            f"S3RemoteStorageManager(s3://{self.config.bucket}/{self.prefix}"
            f" at {self.endpoint_url})"
        )

    # -- retries ------------------------------------------------------------------------------

    def _call(self, operation: str, key: str, call: Callable[[], T]) -> T:
        """Run one S3 request with bounded retries (``s3_retries``)."""
        return call_with_retries(self.config, self.endpoint_url, operation, key, call)

    # -- copy ---------------------------------------------------------------------------------

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        log_segment_data: LogSegmentData,
    ) -> bytes | None:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        keys = segment_keys(self.prefix, segment)
        files: dict[RemoteObjectSuffix, Path | None] = {
            RemoteObjectSuffix.LOG: log_segment_data.log_segment,
            RemoteObjectSuffix.OFFSET_INDEX: log_segment_data.offset_index,
            RemoteObjectSuffix.TIME_INDEX: log_segment_data.time_index,
            RemoteObjectSuffix.PRODUCER_SNAPSHOT: log_segment_data.producer_snapshot,
            RemoteObjectSuffix.TRANSACTION_INDEX: log_segment_data.transaction_index,
        }
        total_bytes = 0
        for suffix, path in files.items():
            if path is not None:
                total_bytes += self._upload_file(keys[suffix], path)
        epochs_key = keys[RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT]
        self._put_verified(epochs_key, log_segment_data.leader_epoch_index)
        total_bytes += len(log_segment_data.leader_epoch_index)
        if log_segment_data.segment_manifest is not None:
            # Last: a manifest names a segment whose every other object is in the bucket.
            manifest_key = keys[RemoteObjectSuffix.SEGMENT_MANIFEST]
            self._put_verified(manifest_key, log_segment_data.segment_manifest)
            total_bytes += len(log_segment_data.segment_manifest)
        logger.info(
            "copied remote segment partition=%s-%d segment_id=%s start_offset=%d bytes=%d"
            " bucket=%s",
            segment.topic,
            segment.partition,
            segment.segment_id,
            segment.start_offset,
            total_bytes,
            self.config.bucket,
        )
        return None

    def _upload_file(self, key: str, path: Path) -> int:
        try:
            with open(path, "rb") as file:
                size = file.seek(0, io.SEEK_END)
                file.seek(0)
                if size <= self.config.multipart_threshold_bytes:
                    data = file.read(size + 1)
                    check_read(data, size, path)
                    self._put_verified(key, data)
                else:
                    self._multipart_upload(key, file, size, path)
        except OSError as exc:
            raise RemoteStorageError(
                f"reading {path} to upload it to s3://{self.config.bucket}/{key} failed: {exc}"
            ) from exc
        return size

    def _put_verified(self, key: str, data: bytes) -> None:
        digest = Digest(self.config.checksum_algorithm, data)
        self._call(
            "PutObject",
            key,
            lambda: self._client.put_object(
                Bucket=self.config.bucket, Key=key, Body=data, **digest.request_args()
            ),
        )
        self._verify(key, len(data), digest, part_count=None)

    def _multipart_upload(self, key: str, file: BinaryIO, size: int, path: Path) -> None:
        config = self.config
        part_size = config.multipart_part_size_bytes
        part_count = math.ceil(size / part_size)
        if part_count > S3_MAX_PARTS:
            raise RemoteStorageError(
                f"{path} ({size} bytes) needs {part_count} parts of {part_size} bytes, more than"
                f" S3's {S3_MAX_PARTS}; raise rsm.config.s3.multipart.part.size.bytes"
            )
        create_args: dict[str, str] = {}
        if config.checksum_algorithm == "SHA256":
            create_args["ChecksumAlgorithm"] = "SHA256"
        upload = self._call(
            "CreateMultipartUpload",
            key,
            lambda: self._client.create_multipart_upload(
                Bucket=config.bucket, Key=key, **create_args
            ),
        )
        upload_id: str = upload["UploadId"]
        try:
            parts: list[dict[str, Any]] = []
            digests: list[Digest] = []
            for number in range(1, part_count + 1):
                data = file.read(min(part_size, size - (number - 1) * part_size))
                check_read(data, min(part_size, size - (number - 1) * part_size), path)
                digest = Digest(config.checksum_algorithm, data)
                answer = self._call(
                    f"UploadPart {number}/{part_count}",
                    key,
                    functools.partial(
                        self._client.upload_part,
                        Bucket=config.bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=data,
                        **digest.request_args(),
                    ),
                )
                part: dict[str, Any] = {"PartNumber": number, "ETag": answer["ETag"]}
                if config.checksum_algorithm == "SHA256":
                    part["ChecksumSHA256"] = digest.b64
                parts.append(part)
                digests.append(digest)
            if file.read(1):
                raise RemoteStorageError(f"{path} grew during its upload (expected {size} bytes)")
            self._complete(key, upload_id, parts)
        except BaseException as exc:
            self._abort_quietly(key, upload_id, exc)
            raise
        self._verify(key, size, composite_digest(config.checksum_algorithm, digests), part_count)

    def _complete(self, key: str, upload_id: str, parts: list[dict[str, Any]]) -> None:
        attempts = 0

        def complete() -> None:
            nonlocal attempts
            attempts += 1
            try:
                self._client.complete_multipart_upload(
                    Bucket=self.config.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
            except botocore.exceptions.ClientError as exc:
                # A retry after a completion whose answer was lost: the HEAD decides.
                if attempts > 1 and error_code(exc) == "NoSuchUpload":
                    return
                raise

        self._call("CompleteMultipartUpload", key, complete)

    def _abort_quietly(self, key: str, upload_id: str, cause: BaseException) -> None:
        try:
            self._client.abort_multipart_upload(
                Bucket=self.config.bucket, Key=key, UploadId=upload_id
            )
        except Exception as exc:
            logger.warning(
                "could not abort multipart upload bucket=%s key=%s upload_id=%s error=%s"
                " cause=%s (abort_incomplete_multipart_uploads will remove it)",
                self.config.bucket,
                key,
                upload_id,
                exc,
                cause,
            )

    def _verify(self, key: str, size: int, digest: Digest, part_count: int | None) -> None:
        """HEAD the object: its size and checksum must be what was uploaded."""
        head = self._call(
            "HeadObject",
            key,
            lambda: self._client.head_object(
                Bucket=self.config.bucket, Key=key, ChecksumMode="ENABLED"
            ),
        )
        where = f"s3://{self.config.bucket}/{key} at {self.endpoint_url}"
        stored_size = int(head["ContentLength"])
        if stored_size != size:
            raise RemoteStorageError(
                f"{where} holds {stored_size} bytes after upload, expected {size}"
            )
        if digest.algorithm == "SHA256":
            stored = head.get("ChecksumSHA256")
            expected = digest.b64
            if stored is not None and part_count is not None and "-" in stored:
                expected = f"{digest.b64}-{part_count}"
        else:
            stored = str(head.get("ETag", "")).strip('"')
            expected = digest.raw.hex() + ("" if part_count is None else f"-{part_count}")
        if stored is None:
            raise RemoteStorageError(
                f"{where} shows no SHA-256 checksum after upload; the store does not keep"
                " flexible checksums: set rsm.config.s3.checksum.algorithm=MD5"
            )
        if stored != expected:
            raise RemoteStorageError(
                f"{where} has checksum {stored!r} after upload, expected {expected!r}"
                f" ({digest.algorithm}); the object is corrupt or was overwritten"
            )

    # -- fetch --------------------------------------------------------------------------------

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        check_positions(start_position, end_position)
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        key = segment_key(self.prefix, segment, RemoteObjectSuffix.LOG)
        if start_position == 0 and end_position is None:
            return self._get(key, None)
        end = "" if end_position is None else str(end_position)
        return self._get(key, (start_position, f"bytes={start_position}-{end}"))

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike, index_type: IndexType
    ) -> BinaryIO:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        key = segment_key(self.prefix, segment, RemoteObjectSuffix.for_index(index_type))
        return self._get(key, None)

    def fetch_segment_manifest(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> bytes | None:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        key = segment_key(self.prefix, segment, RemoteObjectSuffix.SEGMENT_MANIFEST)
        try:
            with self._get(key, None) as body:
                return body.read()
        except RemoteResourceNotFoundError:
            return None

    def _get(self, key: str, byte_range: tuple[int, str] | None) -> BinaryIO:
        args: dict[str, Any] = {"Bucket": self.config.bucket, "Key": key}
        if byte_range is None:
            args["ChecksumMode"] = "ENABLED"
        else:
            args["Range"] = byte_range[1]
        where = f"s3://{self.config.bucket}/{key} at {self.endpoint_url}"
        try:
            answer = self._call("GetObject", key, lambda: self._client.get_object(**args))
        except RemoteStorageError as exc:
            cause = exc.__cause__
            if (
                byte_range is not None
                and isinstance(cause, botocore.exceptions.ClientError)
                and error_code(cause) == "InvalidRange"
            ):
                raise RemoteStorageError(
                    f"start position {byte_range[0]} is beyond the end of {where}"
                ) from cause
            raise
        length = int(answer["ContentLength"])
        if byte_range is not None:
            content_range = str(answer.get("ContentRange", ""))
            if not content_range.startswith(f"bytes {byte_range[0]}-"):
                answer["Body"].close()
                raise RemoteStorageError(
                    f"{where} answered range {byte_range[1]!r} with {content_range!r}"
                )
        return io.BufferedReader(CheckedBody(answer["Body"], length, where))

    # -- delete -------------------------------------------------------------------------------

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> None:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        keys = segment_keys(self.prefix, segment)
        # The manifest goes first, on its own: a deletion cut short leaves objects without
        # one (nothing reads them back; reconcile removes them), never a manifest naming
        # objects that are gone.
        self._delete_keys([keys.pop(RemoteObjectSuffix.SEGMENT_MANIFEST)])
        self._delete_keys(list(keys.values()))
        logger.info(
            "deleted remote segment partition=%s-%d segment_id=%s bucket=%s",
            segment.topic,
            segment.partition,
            segment.segment_id,
            self.config.bucket,
        )

    def _delete_keys(self, keys: list[str]) -> None:
        """Delete up to 1000 keys in one request; keys already gone are fine."""
        if not keys:
            return
        if len(keys) > S3_DELETE_OBJECTS_KEYS_MAX:
            raise ValueError(
                f"DeleteObjects takes at most {S3_DELETE_OBJECTS_KEYS_MAX} keys, got {len(keys)}"
            )
        answer = self._call(
            "DeleteObjects",
            keys[0],
            lambda: self._client.delete_objects(
                Bucket=self.config.bucket,
                Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
            ),
        )
        errors = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            raise RemoteStorageError(
                f"DeleteObjects in s3://{self.config.bucket} at {self.endpoint_url} failed for"
                f" {len(errors)} key(s), first: {errors[0].get('Key')} {errors[0].get('Code')}"
                f" {errors[0].get('Message')}"
            )

    # -- RemoteObjectStore (reconcile, quality) ------------------------------------------------

    def list_objects(self, prefix: str | None = None) -> Iterator[RemoteObjectInfo]:
        """``RemoteObjectStore.list_objects``: every object whose key starts with ``prefix``
        (default: the configured key prefix plus ``/``), in key order, 1000 per
        ``ListObjectsV2`` page; keys parse with ``parse_object_key(key, self.prefix)``. A
        page that fails after its retries raises ``RemoteStorageError`` naming the endpoint."""
        if prefix is None:
            prefix = f"{self.prefix}/" if self.prefix else ""
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.config.bucket, "Prefix": prefix}
            if token is not None:
                args["ContinuationToken"] = token
            page = self._call(
                "ListObjectsV2", prefix, functools.partial(self._client.list_objects_v2, **args)
            )
            for item in page.get("Contents", []):
                yield RemoteObjectInfo(
                    key=item["Key"],
                    size_bytes=int(item["Size"]),
                    last_modified_ms=int(item["LastModified"].timestamp() * 1000),
                )
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    def delete_objects(self, keys: Sequence[str]) -> None:
        """``RemoteObjectStore.delete_objects``: the keys (checked first), 1000 per
        ``DeleteObjects`` request."""
        checked = check_keys_to_delete(keys, self.prefix, repr(self))
        for start in range(0, len(checked), S3_DELETE_OBJECTS_KEYS_MAX):
            try:
                self._delete_keys(checked[start : start + S3_DELETE_OBJECTS_KEYS_MAX])
            except RemoteStorageError as exc:
                raise RemoteStorageError(
                    f"{exc}; {start} of {len(checked)} key(s) were deleted before, the others"
                    " remain: delete them again"
                ) from exc

    def put_object(self, key: str, data: bytes) -> None:
        """``RemoteObjectStore.put_object``: one ``PutObject`` with its checksum (S3 shows a
        reader the old object or the new one whole), then the ``HeadObject`` check."""
        check_bucket_manifest_key(key, self.prefix, repr(self))
        self._put_verified(key, bytes(data))
        logger.info(
            "wrote remote object key=%s bytes=%d bucket=%s", key, len(data), self.config.bucket
        )

    def get_object(self, key: str) -> bytes:
        """``RemoteObjectStore.get_object``: one ``GetObject`` (its checksum checked)."""
        check_bucket_manifest_key(key, self.prefix, repr(self))
        with self._get(key, None) as body:
            return body.read()

    def restore_segment_objects(
        self,
        source: RemoteSegmentRef,
        target: RemoteSegmentRef,
        suffixes: Sequence[RemoteObjectSuffix],
        manifest: bytes,
    ) -> int:
        """``RemoteObjectStore.restore_segment_objects``: one server-side ``CopyObject`` per
        object (the bytes never leave the bucket; S3 copies objects of up to 5 GB so), each
        checked by ``HeadObject`` against the source's size, then the manifest put last."""
        check_restore_target(source, target)
        sources, targets = segment_keys(self.prefix, source), segment_keys(self.prefix, target)
        bucket = self.config.bucket
        stored = 0
        for suffix in suffixes:
            source_key, target_key = sources[suffix], targets[suffix]
            head = self._call(
                "HeadObject",
                source_key,
                functools.partial(self._client.head_object, Bucket=bucket, Key=source_key),
            )
            size = int(head["ContentLength"])
            self._call(
                "CopyObject",
                target_key,
                functools.partial(
                    self._client.copy_object,
                    Bucket=bucket,
                    Key=target_key,
                    CopySource={"Bucket": bucket, "Key": source_key},
                ),
            )
            copied = self._call(
                "HeadObject",
                target_key,
                functools.partial(self._client.head_object, Bucket=bucket, Key=target_key),
            )
            if int(copied["ContentLength"]) != size:
                raise RemoteStorageError(
                    f"s3://{bucket}/{target_key} holds {copied['ContentLength']} bytes after"
                    f" its copy from {source_key}, expected {size}"
                )
            stored += size
        self._put_verified(targets[RemoteObjectSuffix.SEGMENT_MANIFEST], manifest)
        stored += len(manifest)
        logger.info(
            "restored remote segment objects source=%s target=%s objects=%d bytes=%d bucket=%s",
            source.segment_id,
            target,
            len(suffixes) + 1,
            stored,
            bucket,
        )
        return stored

    def abort_incomplete_multipart_uploads(
        self, older_than: timedelta, *, now: datetime | None = None
    ) -> list[str]:
        """Abort multipart uploads under the key prefix started before ``now - older_than``
        (left behind by crashed copies); returns their keys."""
        cutoff = (now or datetime.now(UTC)) - older_than
        prefix = f"{self.prefix}/" if self.prefix else ""
        aborted: list[str] = []
        markers: dict[str, str] = {}
        while True:
            args: dict[str, Any] = {"Bucket": self.config.bucket, "Prefix": prefix, **markers}
            page = self._call(
                "ListMultipartUploads",
                prefix,
                functools.partial(self._client.list_multipart_uploads, **args),
            )
            for upload in page.get("Uploads", []):
                if upload["Initiated"] >= cutoff:
                    continue
                key, upload_id = upload["Key"], upload["UploadId"]
                try:
                    self._call(
                        "AbortMultipartUpload",
                        key,
                        functools.partial(
                            self._client.abort_multipart_upload,
                            Bucket=self.config.bucket,
                            Key=key,
                            UploadId=upload_id,
                        ),
                    )
                except RemoteResourceNotFoundError:
                    pass
                except RemoteStorageError as exc:
                    if not isinstance(exc.__cause__, botocore.exceptions.ClientError) or (
                        error_code(exc.__cause__) != "NoSuchUpload"
                    ):
                        raise
                aborted.append(key)
                logger.info(
                    "aborted incomplete multipart upload bucket=%s key=%s upload_id=%s"
                    " initiated=%s",
                    self.config.bucket,
                    key,
                    upload_id,
                    upload["Initiated"],
                )
            if not page.get("IsTruncated"):
                return aborted
            markers = {
                "KeyMarker": page["NextKeyMarker"],
                "UploadIdMarker": page["NextUploadIdMarker"],
            }

    def close(self) -> None:
        self._client.close()
