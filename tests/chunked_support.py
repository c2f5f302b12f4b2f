"""Helpers for the chunked format's tests: a real segment's files, RSA key pairs on disk and
the format's settings."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from storage_core.common import Uuid
from storage_core.log.leader_epoch_cache import EpochEntry, LeaderEpochCheckpointFile
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.remote_storage_manager import LogSegmentData, RemoteSegmentRef
from tests.conftest import make_batch

TOPIC_ID = Uuid(0x0123456789ABCDEF, -0x0123456789ABCDEF)
MARKER = b"needle-"  # in every record value: a bucket reader must not find it when encrypted


def segment_ref(segment_id: Uuid | None = None, start_offset: int = 0) -> RemoteSegmentRef:
    return RemoteSegmentRef(
        topic="chunked-topic",
        topic_id=TOPIC_ID,
        partition=0,
        segment_id=segment_id or Uuid.random(),
        start_offset=start_offset,
    )


def closed_segment(directory: Path, *, batches: int = 8) -> LogSegmentData:
    """The files of a real closed segment: ``batches`` batches of 10 records of ~300 bytes
    whose values hold ``MARKER``, with a producer snapshot and leader epochs."""
    log = Log(directory / "chunked-topic-0", LogConfig())
    try:
        for i in range(batches):
            batch = make_batch(
                10,
                value_size=300,
                tag=(MARKER.decode() + f"{i:04d}"),
                producer_id=7,
                producer_epoch=0,
                base_sequence=10 * i,
            )
            log.append_as_leader(batch, leader_epoch=i // 3)
        log.roll()
        closed = log.segments[0]
        snapshot = log.fetch_producer_snapshot(log.log_end_offset)
        epochs = directory / "epochs"
        LeaderEpochCheckpointFile(epochs).write(
            [EpochEntry(e, 30 * e) for e in range((batches - 1) // 3 + 1)]
        )
        return LogSegmentData(
            log_segment=closed.log.path,
            offset_index=closed.offset_index.path,
            time_index=closed.time_index.path,
            producer_snapshot=snapshot,
            transaction_index=None,
            leader_epoch_index=epochs.read_bytes(),
        )
    finally:
        log.close()


def closed_segment_metadata(
    ref: RemoteSegmentRef, data: LogSegmentData, *, broker_id: int = 1
) -> RemoteLogSegmentMetadata:
    """The metadata a copy of ``closed_segment``'s files as ``ref`` starts with: offsets
    0..79 in leader epochs 0, 1 and 2."""
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(
            topic_id_partition=ref.topic_id_partition, id=ref.segment_id
        ),
        start_offset=0,
        end_offset=79,
        max_timestamp_ms=1_700_000_000_079,
        broker_id=broker_id,
        event_timestamp_ms=1_700_000_000_100,
        segment_size_in_bytes=data.log_segment.stat().st_size,
        segment_leader_epochs={0: 0, 1: 30, 2: 60},
    )


def write_key_pair(directory: Path, key_id: str, *, bits: int = 2048) -> dict[str, str]:
    """An RSA key pair as PEM files; returns its ``rsm.config.encryption.key.pairs.<id>.*``
    settings."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public = directory / f"{key_id}-public.pem"
    private = directory / f"{key_id}-private.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    prefix = f"rsm.config.encryption.key.pairs.{key_id}"
    return {f"{prefix}.public.key.file": str(public), f"{prefix}.private.key.file": str(private)}


def encryption_settings(
    pairs: dict[str, dict[str, str]], active: str, *, enabled: bool = True
) -> dict[str, str]:
    settings = {
        "rsm.config.encryption.enabled": str(enabled).lower(),
        "rsm.config.encryption.key.pair.id": active,
        "rsm.config.encryption.key.pairs": ",".join(pairs),
    }
    for files in pairs.values():
        settings.update(files)
    return settings
