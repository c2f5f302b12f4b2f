"""S3RemoteStorageManager against moto's S3 server over HTTP on 127.0.0.1 (the ``s3_server``
and ``s3`` fixtures of ``tests/integration/conftest.py``)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from storage_core.common import Uuid
from storage_core.errors import InvalidConfigError
from storage_core.tiered import s3_remote_storage_manager
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectSuffix,
    parse_object_key,
    segment_key,
)
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteObjectStore,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
    RemoteStorageManager,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from storage_core.tiered.s3_integrity import CheckedBody
from storage_core.tiered.s3_remote_storage_config import S3RemoteStorageConfig
from storage_core.tiered.s3_remote_storage_manager import S3RemoteStorageManager
from tests.s3_server import BUCKET, S3Server

PART_SIZE_BYTES = 4096
THRESHOLD_BYTES = 10_000


def make_rsm(s3: S3Server, **overrides: str) -> S3RemoteStorageManager:
    config = {
        "rsm.config.s3.bucket.name": BUCKET,
        "rsm.config.s3.key.prefix": "cluster-a/tiered",
        "rsm.config.s3.endpoint.url": s3.endpoint_url,
        "rsm.config.s3.path.style.access.enabled": "true",
        "rsm.config.s3.multipart.part.size.bytes": str(PART_SIZE_BYTES),
        "rsm.config.s3.multipart.threshold.bytes": str(THRESHOLD_BYTES),
        "rsm.config.s3.retry.backoff.ms": "50",
        "rsm.config.s3.retry.backoff.max.ms": "400",
    }
    config.update({f"rsm.config.{k}": v for k, v in overrides.items()})
    return S3RemoteStorageManager.from_config(config)


@pytest.fixture
def rsm(s3: S3Server) -> Iterator[S3RemoteStorageManager]:
    manager = make_rsm(s3)
    yield manager
    manager.close()


def ref(segment_id: Uuid | None = None, start_offset: int = 100) -> RemoteSegmentRef:
    return RemoteSegmentRef(
        topic="payments",
        topic_id=Uuid(11, 22),
        partition=1,
        segment_id=segment_id or Uuid(33, 44),
        start_offset=start_offset,
    )


def segment_files(directory: Path, log_size_bytes: int) -> LogSegmentData:
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "log": os.urandom(log_size_bytes),
        "index": os.urandom(800),
        "timeindex": os.urandom(1200),
        "snapshot": os.urandom(150),
    }
    for suffix, content in files.items():
        (directory / f"00000000000000000100.{suffix}").write_bytes(content)
    return LogSegmentData(
        log_segment=directory / "00000000000000000100.log",
        offset_index=directory / "00000000000000000100.index",
        time_index=directory / "00000000000000000100.timeindex",
        producer_snapshot=directory / "00000000000000000100.snapshot",
        leader_epoch_index=b"0\n2\n0 0\n4 120\n",
    )


def read_all(stream: Any) -> bytes:
    with stream:
        return bytes(stream.read())


@pytest.mark.parametrize("log_size_bytes", [5000, 3 * PART_SIZE_BYTES + 123])
@pytest.mark.parametrize("algorithm", ["SHA256", "MD5"])
def test_copy_then_fetch_everything(
    s3: S3Server, tmp_path: Path, log_size_bytes: int, algorithm: str
) -> None:
    rsm = make_rsm(s3, **{"s3.checksum.algorithm": algorithm})
    assert isinstance(rsm, RemoteStorageManager)
    data = segment_files(tmp_path, log_size_bytes)
    assert rsm.copy_log_segment_data(ref(), data) is None

    assert read_all(rsm.fetch_log_segment(ref(), 0)) == data.log_segment.read_bytes()
    expected = {
        IndexType.OFFSET: data.offset_index.read_bytes(),
        IndexType.TIMESTAMP: data.time_index.read_bytes(),
        IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot.read_bytes(),  # type: ignore[union-attr]
        IndexType.LEADER_EPOCH: data.leader_epoch_index,
    }
    for index_type, content in expected.items():
        assert read_all(rsm.fetch_index(ref(), index_type)) == content, index_type
    with pytest.raises(RemoteResourceNotFoundError, match=r"\.txnindex"):
        rsm.fetch_index(ref(), IndexType.TRANSACTION)

    # The objects sit under the documented keys, with the checksums S3 keeps for them.
    client = s3.client()
    key = segment_key("cluster-a/tiered", ref(), RemoteObjectSuffix.LOG)
    head = client.head_object(Bucket=BUCKET, Key=key, ChecksumMode="ENABLED")
    assert head["ContentLength"] == log_size_bytes
    log_bytes = data.log_segment.read_bytes()
    multipart = log_size_bytes > THRESHOLD_BYTES
    if algorithm == "SHA256" and not multipart:
        assert (
            head["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(log_bytes).digest()).decode()
        )
    if algorithm == "MD5" and not multipart:
        assert head["ETag"].strip('"') == hashlib.md5(log_bytes).hexdigest()
    if multipart:
        assert head["ETag"].strip('"').endswith("-4")  # 3 full parts and a short one
    rsm.close()


def test_ranged_reads(rsm: S3RemoteStorageManager, tmp_path: Path) -> None:
    data = segment_files(tmp_path, 3 * PART_SIZE_BYTES + 123)
    rsm.copy_log_segment_data(ref(), data)
    content = data.log_segment.read_bytes()
    size = len(content)
    for start, end in [(0, 0), (0, 99), (4000, 4200), (size - 1, None), (17, None), (10, 10**9)]:
        got = read_all(rsm.fetch_log_segment(ref(), start, end))
        assert got == content[start : None if end is None else end + 1], (start, end)
    with rsm.fetch_log_segment(ref(), 100, 199) as stream:
        assert stream.read(10) == content[100:110]
        assert stream.read() == content[110:200]
    with pytest.raises(RemoteStorageError, match="beyond"):
        rsm.fetch_log_segment(ref(), size)
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(ref(), 5, 4)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(ref(segment_id=Uuid(9, 9)), 0, 10)


def test_copy_is_idempotent_and_delete_removes_everything(
    s3: S3Server, rsm: S3RemoteStorageManager, tmp_path: Path
) -> None:
    data = segment_files(tmp_path, 20_000)
    rsm.copy_log_segment_data(ref(), data)
    rsm.copy_log_segment_data(ref(), data)
    other = ref(segment_id=Uuid(55, 66), start_offset=200)
    rsm.copy_log_segment_data(other, data)
    listed = list(rsm.list_objects())
    assert len(listed) == 10
    assert {parse_object_key(i.key, rsm.prefix).segment for i in listed} == {ref(), other}

    rsm.delete_log_segment_data(ref())
    rsm.delete_log_segment_data(ref())  # already gone: fine
    rsm.delete_log_segment_data(ref(segment_id=Uuid(1, 1)))  # never existed: fine
    remaining = {parse_object_key(i.key, rsm.prefix).segment for i in rsm.list_objects()}
    assert remaining == {other}
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(ref(), IndexType.OFFSET)
    assert read_all(rsm.fetch_log_segment(other, 0)) == data.log_segment.read_bytes()


def test_failed_multipart_upload_is_aborted(
    s3: S3Server, rsm: S3RemoteStorageManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = segment_files(tmp_path, 3 * PART_SIZE_BYTES)
    client = rsm._client
    real_upload_part = client.upload_part
    calls = []

    def failing_upload_part(**kwargs: Any) -> Any:
        calls.append(kwargs["PartNumber"])
        if kwargs["PartNumber"] == 2:
            raise PermissionError("simulated: the disk went away")
        return real_upload_part(**kwargs)

    monkeypatch.setattr(client, "upload_part", failing_upload_part)
    with pytest.raises(RemoteStorageError, match="UploadPart 2/3"):
        rsm.copy_log_segment_data(ref(), data)
    assert calls == [1, 2]  # not a retriable error: one attempt
    assert s3.client().list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_checksum_mismatch_after_upload_is_detected(
    s3: S3Server, rsm: S3RemoteStorageManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer replaces the object between the PUT and the HEAD: the copy fails."""
    data = segment_files(tmp_path, 5000)
    client = rsm._client
    real_put = client.put_object

    def put_then_clobber(**kwargs: Any) -> Any:
        answer = real_put(**kwargs)
        if kwargs["Key"].endswith(".log"):
            s3.client().put_object(
                Bucket=BUCKET, Key=kwargs["Key"], Body=b"x" * 5000, ChecksumAlgorithm="SHA256"
            )
        return answer

    monkeypatch.setattr(client, "put_object", put_then_clobber)
    with pytest.raises(RemoteStorageError, match="checksum"):
        rsm.copy_log_segment_data(ref(), data)


def test_abort_incomplete_multipart_uploads(s3: S3Server, rsm: S3RemoteStorageManager) -> None:
    client = s3.client()
    key = segment_key("cluster-a/tiered", ref(), RemoteObjectSuffix.LOG)
    client.create_multipart_upload(Bucket=BUCKET, Key=key)
    client.create_multipart_upload(Bucket=BUCKET, Key="someone-else/file")
    # moto reports every upload as initiated at 2010-11-10T20:48:33Z.
    initiated = datetime(2010, 11, 10, 20, 48, 33, tzinfo=UTC)
    now = initiated + timedelta(minutes=30)
    assert rsm.abort_incomplete_multipart_uploads(timedelta(hours=1), now=now) == []
    assert rsm.abort_incomplete_multipart_uploads(timedelta(minutes=10), now=now) == [key]
    assert rsm.abort_incomplete_multipart_uploads(timedelta(minutes=10), now=now) == []
    remaining = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert [u["Key"] for u in remaining] == ["someone-else/file"]
    client.abort_multipart_upload(
        Bucket=BUCKET, Key="someone-else/file", UploadId=remaining[0]["UploadId"]
    )


def test_unreachable_store_fails_promptly_and_recovers(
    s3: S3Server, rsm: S3RemoteStorageManager, tmp_path: Path
) -> None:
    data = segment_files(tmp_path, 5000)
    rsm.copy_log_segment_data(ref(), data)
    s3.stop()
    try:
        started = time.monotonic()
        with pytest.raises(RemoteStorageError) as info:
            rsm.fetch_log_segment(ref(), 0, 10)
        elapsed_s = time.monotonic() - started
        message = str(info.value)
        assert BUCKET in message and s3.endpoint_url in message and ".log" in message
        assert "reachable" in message
        assert "5 attempt(s)" in message
        assert elapsed_s < 5, elapsed_s
        with pytest.raises(RemoteStorageError, match="reachable"):
            rsm.copy_log_segment_data(ref(), data)
    finally:
        s3.start()
    # moto comes back empty: the bucket is re-created, then the same manager works again.
    s3.create_bucket(BUCKET)
    rsm.copy_log_segment_data(ref(), data)
    assert read_all(rsm.fetch_log_segment(ref(), 0)) == data.log_segment.read_bytes()


def test_read_timeout_is_bounded(s3: S3Server, tmp_path: Path) -> None:
    """A store that accepts connections but never answers fails within the timeouts."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(silent.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        rsm = S3RemoteStorageManager(
            S3RemoteStorageConfig(
                bucket=BUCKET,
                endpoint_url=f"http://127.0.0.1:{silent.getsockname()[1]}",
                path_style_access=True,
                read_timeout_ms=300,
                retry_max_attempts=3,
                retry_backoff_ms=10,
                retry_backoff_max_ms=50,
            )
        )
        started = time.monotonic()
        with pytest.raises(RemoteStorageError, match="3 attempt"):
            rsm.fetch_index(ref(), IndexType.OFFSET)
        assert time.monotonic() - started < 3
        rsm.close()
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        silent.close()


def test_missing_bucket_and_missing_credentials_say_what_to_do(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = segment_files(tmp_path, 100)
    no_bucket = make_rsm(s3, **{"s3.bucket.name": "does-not-exist"})
    with pytest.raises(RemoteStorageError, match=r"create the bucket") as info:
        no_bucket.copy_log_segment_data(ref(), data)
    assert "1 attempt(s)" in str(info.value)
    no_bucket.close()

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    anonymous = make_rsm(s3)
    with pytest.raises(RemoteStorageError, match="AWS_ACCESS_KEY_ID"):
        anonymous.copy_log_segment_data(ref(), data)
    anonymous.close()


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="bucket"):
        S3RemoteStorageConfig.from_config({})
    with pytest.raises(ValueError, match="checksum"):
        S3RemoteStorageConfig(bucket="b", checksum_algorithm="CRC7")
    with pytest.raises(ValueError, match="integer"):
        S3RemoteStorageConfig.from_config(
            {"rsm.config.s3.bucket.name": "b", "rsm.config.s3.read.timeout.ms": "soon"}
        )
    config = S3RemoteStorageConfig.from_config(
        {"s3.bucket.name": "b", "s3.key.prefix": "/x/y/", "s3.checksum.algorithm": "md5"}
    )
    assert (config.key_prefix, config.checksum_algorithm) == ("x/y", "MD5")
    assert (config.connect_timeout_ms, config.read_timeout_ms) == (2000, 10000)


def test_throttling_is_retried_with_backoff(
    rsm: S3RemoteStorageManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = segment_files(tmp_path, 5000)
    client = rsm._client
    real_put = client.put_object
    attempts: list[str] = []

    def slow_down_twice(**kwargs: Any) -> Any:
        attempts.append(kwargs["Key"])
        if len(attempts) <= 2:
            raise botocore.exceptions.ClientError(
                {
                    "Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
                    "ResponseMetadata": {"HTTPStatusCode": 503},
                },
                "PutObject",
            )
        return real_put(**kwargs)

    monkeypatch.setattr(client, "put_object", slow_down_twice)
    rsm.copy_log_segment_data(ref(), data)
    assert attempts[0] == attempts[1] == attempts[2]  # the same object, three times
    assert read_all(rsm.fetch_log_segment(ref(), 0)) == data.log_segment.read_bytes()


def test_a_stream_that_ends_early_is_an_error() -> None:
    class ShortBody:
        def __init__(self) -> None:
            self.chunks = [b"abc", b""]

        def read(self, size: int) -> bytes:
            return self.chunks.pop(0)

        def close(self) -> None:
            pass

    stream = io.BufferedReader(CheckedBody(ShortBody(), 10, "s3://b/k"))
    with pytest.raises(RemoteStorageError, match="7 bytes before"):
        stream.read()


def test_loaded_by_class_name(s3: S3Server) -> None:
    manager = load_remote_storage_manager(
        "S3RemoteStorageManager",
        {"rsm.config.s3.bucket.name": BUCKET, "rsm.config.s3.endpoint.url": s3.endpoint_url},
    )
    assert isinstance(manager, ChunkedRemoteStorageManager)
    assert isinstance(manager.store, S3RemoteStorageManager)
    assert manager.store.endpoint_url == s3.endpoint_url
    manager.close()
    with pytest.raises(InvalidConfigError, match="bucket"):
        load_remote_storage_manager("S3RemoteStorageManager", {})


def test_delete_objects_by_key_in_batches(
    s3: S3Server, rsm: S3RemoteStorageManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(rsm, RemoteObjectStore)
    data = segment_files(tmp_path, 5000)
    segments = [ref(segment_id=Uuid(100 + i, i), start_offset=100 * i) for i in range(3)]
    for segment in segments:
        rsm.copy_log_segment_data(segment, data)
    foreign = "cluster-a/tiered/notes.txt"
    s3.client().put_object(Bucket=BUCKET, Key=foreign, Body=b"someone else's")
    listed = [info.key for info in rsm.list_objects()]
    assert listed == sorted(listed) and foreign in listed and len(listed) == 16

    requests: list[int] = []
    real_delete = rsm._client.delete_objects

    def counted(**kwargs: Any) -> Any:
        requests.append(len(kwargs["Delete"]["Objects"]))
        return real_delete(**kwargs)

    monkeypatch.setattr(rsm._client, "delete_objects", counted)
    monkeypatch.setattr(s3_remote_storage_manager, "S3_DELETE_OBJECTS_KEYS_MAX", 4)
    ours = [k for k in listed if k != foreign]
    doomed = [k for k in ours if parse_object_key(k, rsm.prefix).segment != segments[2]]
    never_stored = segment_key(rsm.prefix, ref(segment_id=Uuid(9, 9)), RemoteObjectSuffix.LOG)
    rsm.delete_objects([*doomed, never_stored])
    assert requests == [4, 4, 3]
    left = [info.key for info in rsm.list_objects()]
    assert sorted(left) == sorted([foreign, *(k for k in ours if k not in doomed)])

    with pytest.raises(InvalidRemoteObjectKeyError, match="nothing was deleted") as info:
        rsm.delete_objects([left[0], foreign])
    assert foreign in str(info.value) and BUCKET in str(info.value)
    assert [i.key for i in rsm.list_objects()] == left
    assert requests == [4, 4, 3]


def test_an_unreachable_store_names_its_endpoint_and_loses_nothing(
    s3: S3Server, rsm: S3RemoteStorageManager, tmp_path: Path
) -> None:
    rsm.copy_log_segment_data(ref(), segment_files(tmp_path, 5000))
    stored = [info.key for info in rsm.list_objects()]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    away_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there now
    away = make_rsm(s3, **{"s3.endpoint.url": away_url, "s3.retry.max.attempts": "2"})
    try:
        with pytest.raises(RemoteStorageError) as listing:
            list(away.list_objects())
        assert away_url in str(listing.value) and "reachable" in str(listing.value)
        assert "ListObjectsV2" in str(listing.value) and BUCKET in str(listing.value)
        with pytest.raises(RemoteStorageError) as deleting:
            away.delete_objects(stored)
        message = str(deleting.value)
        assert away_url in message and "reachable" in message
        assert "0 of 5 key(s) were deleted before, the others remain" in message
    finally:
        away.close()
    assert [info.key for info in rsm.list_objects()] == stored
    rsm.delete_objects(stored)
    assert list(rsm.list_objects()) == []
