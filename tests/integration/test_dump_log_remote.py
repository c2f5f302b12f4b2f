"""``storage-core dump-log`` on the objects of remote segments in a local-directory store
and in S3 (moto's server over HTTP, the ``s3`` fixture: ``s3://<bucket>/<key>``).

A real closed segment (``tests/chunked_support.closed_segment``: 8 batches of 10 records of
~300 bytes, values holding a marker) is copied by ``ChunkedRemoteStorageManager`` over
``LocalTieredStorage`` in 1000-byte chunks (smaller than a batch), zstd and AES-256-GCM with
key pair ``k1``; the oracle is the same command on the local segment's files.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

from storage_core.cli import main
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.format_config import ChunkedFormatConfig, split_format_config
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import LogSegmentData, RemoteSegmentRef
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from storage_core.tiered.s3_remote_storage_manager import S3RemoteStorageManager
from tests.chunked_support import (
    MARKER,
    closed_segment,
    encryption_settings,
    segment_ref,
    write_key_pair,
)
from tests.s3_server import BUCKET, S3Server

CHUNK_BYTES = 1000


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def json_rows(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def without_file_rows(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [row for row in rows if row["type"] != "file"]


class Copied:
    def __init__(self, tmp_path: Path, *, chunked: bool) -> None:
        self.data: LogSegmentData = closed_segment(tmp_path / "local", batches=8)
        keys = tmp_path / "keys"
        keys.mkdir()
        self.settings = {
            "rsm.config.chunk.size": str(CHUNK_BYTES),
            "rsm.config.compression.enabled": "true",
            **encryption_settings({"k1": write_key_pair(keys, "k1")}, "k1"),
        }
        self.store_dir = tmp_path / "remote"
        self.segment: RemoteSegmentRef = segment_ref()
        store = LocalTieredStorage(self.store_dir, fsync=False)
        if chunked:
            format_settings, _ = split_format_config(self.settings)
            rsm = ChunkedRemoteStorageManager(
                store, ChunkedFormatConfig.from_settings(format_settings)
            )
            rsm.copy_log_segment_data(self.segment, self.data)
            rsm.close()
        else:
            store.copy_log_segment_data(self.segment, self.data)
            store.close()

    def path(self, suffix: RemoteObjectSuffix) -> Path:
        return self.store_dir / segment_key("", self.segment, suffix)

    def rsm_config_args(self) -> list[str]:
        args = []
        for key, value in self.settings.items():
            args += ["--rsm-config", f"{key}={value}"]
        return args


def test_a_chunked_encrypted_log_dumps_as_the_local_segment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = Copied(tmp_path, chunked=True)
    remote_log = copied.path(RemoteObjectSuffix.LOG)
    assert MARKER not in remote_log.read_bytes()  # encrypted: the oracle is not the object
    status, local_out, _ = run(
        capsys, "dump-log", str(copied.data.log_segment), "--print-data", "--json"
    )
    assert status == 0
    status, remote_out, err = run(
        capsys, "dump-log", str(remote_log), "--print-data", "--json", *copied.rsm_config_args()
    )
    assert status == 0, err
    local_rows, remote_rows = json_rows(local_out), json_rows(remote_out)
    assert without_file_rows(remote_rows) == without_file_rows(local_rows)
    assert sum(row["type"] == "record" for row in remote_rows) == 80
    assert remote_rows[0] == {
        "type": "file",
        "file": str(remote_log),
        "base_offset": 0,
        "format": "chunked",
        "compression": "zstd",
        "encryption_key_id": "k1",
    }
    status, text, _ = run(capsys, "dump-log", str(remote_log), *copied.rsm_config_args())
    assert status == 0
    assert text.splitlines()[0] == (
        f"Dumping {remote_log} format: chunked compression: zstd encryptionKeyId: k1"
    )


def test_chunked_indexes_and_epochs_dump_and_verify_as_the_local_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = Copied(tmp_path, chunked=True)
    for suffix, local in (
        (RemoteObjectSuffix.OFFSET_INDEX, copied.data.offset_index),
        (RemoteObjectSuffix.TIME_INDEX, copied.data.time_index),
    ):
        _, local_out, _ = run(capsys, "dump-log", str(local), "--verify-index", "--json")
        status, remote_out, err = run(
            capsys,
            "dump-log",
            str(copied.path(suffix)),
            "--verify-index",
            "--json",
            *copied.rsm_config_args(),
        )
        assert status == 0, err
        rows = without_file_rows(json_rows(remote_out))
        assert rows == without_file_rows(json_rows(local_out))
        assert rows  # entries
        assert not any(row["type"] == "mismatch" for row in rows)
    status, out, _ = run(
        capsys,
        "dump-log",
        str(copied.path(RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT)),
        "--json",
        *copied.rsm_config_args(),
    )
    assert status == 0
    assert [r["epoch"] for r in json_rows(out) if r["type"] == "epoch_entry"] == [0, 1, 2]


def test_the_manifest_prints_its_format_and_key_id_and_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = Copied(tmp_path, chunked=True)
    manifest_path = copied.path(RemoteObjectSuffix.SEGMENT_MANIFEST)
    manifest = json.loads(manifest_path.read_bytes())
    status, out, _ = run(capsys, "dump-log", str(manifest_path), "--json")
    assert status == 0
    (row,) = json_rows(out)
    assert row["format"] == "chunked" and row["encryption_key_id"] == "k1"
    assert row["chunk_size"] == CHUNK_BYTES
    frames = len(base64.b64decode(manifest["frames"]["storedSizes"])) // 4  # 32-bit sizes
    assert row["frames"] == frames > 8  # chunks < a batch
    assert row["original_size"] == copied.data.log_segment.stat().st_size
    status, out, _ = run(
        capsys,
        "dump-log",
        str(copied.path(RemoteObjectSuffix.LOG)),
        str(manifest_path),
        "--print-data",
        *copied.rsm_config_args(),
    )
    assert status == 0
    for secret in (manifest["encryption"]["wrappedDataKey"], manifest["encryption"]["aad"]):
        assert secret not in out


def test_a_missing_key_is_an_error_naming_the_key_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = Copied(tmp_path, chunked=True)
    remote_log = str(copied.path(RemoteObjectSuffix.LOG))
    status, out, err = run(capsys, "dump-log", remote_log)
    assert status == 2
    assert out == ""
    assert "key pair 'k1'" in err and "encryption.key.pairs" in err
    other = write_key_pair(tmp_path / "keys", "k2")
    ring_without_k1 = encryption_settings({"k2": other}, "k2")
    argv = [arg for k, v in ring_without_k1.items() for arg in ("--rsm-config", f"{k}={v}")]
    status, out, err = run(capsys, "dump-log", remote_log, *argv)
    assert status == 2
    assert "key pair 'k1'" in err and "ring: k2" in err
    assert "PRIVATE KEY" not in err


def test_a_corrupt_chunk_ends_the_dump_with_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = Copied(tmp_path, chunked=True)
    remote_log = copied.path(RemoteObjectSuffix.LOG)
    manifest = json.loads(copied.path(RemoteObjectSuffix.SEGMENT_MANIFEST).read_bytes())
    packed = base64.b64decode(manifest["frames"]["storedSizes"])
    sizes = struct.unpack(f">{len(packed) // 4}I", packed)  # big-endian 32-bit sizes
    data = bytearray(remote_log.read_bytes())
    data[sum(sizes[:5]) + sizes[5] // 2] ^= 0x01  # in chunk 5: original bytes 5000-5999
    remote_log.write_bytes(bytes(data))
    status, out, _ = run(capsys, "dump-log", str(remote_log), "--json", *copied.rsm_config_args())
    assert status == 3
    rows = json_rows(out)
    batches = [row for row in rows if row["type"] == "batch"]
    assert batches and all(b["position"] + b["size"] <= 5000 for b in batches)
    assert all(b["crc_valid"] for b in batches)
    assert "chunk 5 (original bytes 5000-5999)" in str(rows[-1]["error"])
    assert "CRC32C" in str(rows[-1]["error"])


def test_a_plain_remote_log_dumps_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = Copied(tmp_path, chunked=False)
    remote_log = copied.path(RemoteObjectSuffix.LOG)
    assert not copied.path(RemoteObjectSuffix.SEGMENT_MANIFEST).exists()
    _, local_out, _ = run(
        capsys, "dump-log", str(copied.data.log_segment), "--print-data", "--json"
    )
    status, remote_out, _ = run(capsys, "dump-log", str(remote_log), "--print-data", "--json")
    assert status == 0
    assert without_file_rows(json_rows(remote_out)) == without_file_rows(json_rows(local_out))


# ---------------------------------------------------------------------------- S3 (moto)
S3_PREFIX = "cluster-a/tiered"


def s3_args(s3: S3Server, settings: dict[str, str]) -> list[str]:
    store = {
        "rsm.config.s3.key.prefix": S3_PREFIX,
        "rsm.config.s3.endpoint.url": s3.endpoint_url,
        "rsm.config.s3.path.style.access.enabled": "true",
        "rsm.config.s3.retry.max.attempts": "2",
    }
    return [arg for k, v in {**store, **settings}.items() for arg in ("--rsm-config", f"{k}={v}")]


def copy_to_s3(s3: S3Server, tmp_path: Path, *, chunked: bool) -> tuple[Copied, str]:
    """A segment copied to the bucket (chunked with the settings of ``Copied``, or plain by
    the bare manager); returns it and the ``s3://`` URL of its ``.log``."""
    copied = Copied(tmp_path, chunked=False)  # the local files, keys and settings
    store = {
        "rsm.config.s3.bucket.name": BUCKET,
        "rsm.config.s3.key.prefix": S3_PREFIX,
        "rsm.config.s3.endpoint.url": s3.endpoint_url,
        "rsm.config.s3.path.style.access.enabled": "true",
    }
    if chunked:
        rsm = load_remote_storage_manager("S3RemoteStorageManager", {**store, **copied.settings})
    else:
        rsm = S3RemoteStorageManager.from_config(store)
    rsm.copy_log_segment_data(copied.segment, copied.data)
    rsm.close()
    key = segment_key(S3_PREFIX, copied.segment, RemoteObjectSuffix.LOG)
    return copied, f"s3://{BUCKET}/{key}"


def test_a_chunked_log_in_s3_dumps_as_the_local_segment(
    s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied, url = copy_to_s3(s3, tmp_path, chunked=True)
    _, local_out, _ = run(
        capsys, "dump-log", str(copied.data.log_segment), "--print-data", "--json"
    )
    status, out, err = run(
        capsys, "dump-log", url, "--print-data", "--json", *s3_args(s3, copied.settings)
    )
    assert status == 0, err
    rows = json_rows(out)
    assert without_file_rows(rows) == without_file_rows(json_rows(local_out))
    assert rows[0]["file"] == url and rows[0]["encryption_key_id"] == "k1"
    index_url = url.removesuffix(".log") + ".index"
    status, out, err = run(
        capsys, "dump-log", index_url, "--verify-index", "--json", *s3_args(s3, copied.settings)
    )
    assert status == 0, err
    _, local_index, _ = run(
        capsys, "dump-log", str(copied.data.offset_index), "--verify-index", "--json"
    )
    assert without_file_rows(json_rows(out)) == without_file_rows(json_rows(local_index))

    status, out, err = run(capsys, "dump-log", url, *s3_args(s3, {}))
    assert status == 2 and out == ""
    assert "key pair 'k1'" in err


def test_a_plain_log_in_s3_dumps_as_the_local_segment_and_a_bad_chunk_is_named(
    s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied, url = copy_to_s3(s3, tmp_path / "plain", chunked=False)
    _, local_out, _ = run(
        capsys, "dump-log", str(copied.data.log_segment), "--print-data", "--json"
    )
    status, out, _ = run(capsys, "dump-log", url, "--print-data", "--json", *s3_args(s3, {}))
    assert status == 0
    assert without_file_rows(json_rows(out)) == without_file_rows(json_rows(local_out))

    copied, url = copy_to_s3(s3, tmp_path / "chunked", chunked=True)
    key = url.removeprefix(f"s3://{BUCKET}/")
    client = s3.client()
    data = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    data[len(data) // 2] ^= 0x01
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(data))
    status, out, _ = run(capsys, "dump-log", url, "--json", *s3_args(s3, copied.settings))
    assert status == 3
    rows = json_rows(out)
    assert [r for r in rows if r["type"] == "batch"]  # the chunks before are dumped
    assert "chunk" in str(rows[-1]["error"]) and "CRC32C" in str(rows[-1]["error"])
