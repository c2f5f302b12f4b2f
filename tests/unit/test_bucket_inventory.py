"""Reading a partition's segments back from the bucket's manifests, each checked against the
objects it lists, on the local-directory store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from storage_core.common import Uuid
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.recovery.bucket_inventory import scan_bucket
from storage_core.tiered.recovery.restore_plan import plan_partition
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_keys
from storage_core.tiered.remote_storage_manager import LogSegmentData, RemoteSegmentRef
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.chunked_support import closed_segment, closed_segment_metadata, segment_ref


@pytest.fixture
def data(tmp_path: Path) -> LogSegmentData:
    return closed_segment(tmp_path, batches=8)  # offsets 0..79, epochs 0, 1, 2


def chunked(tmp_path: Path) -> ChunkedRemoteStorageManager:
    manager = load_remote_storage_manager(
        "LocalTieredStorage",
        {
            "rsm.config.local.storage.dir": str(tmp_path / "remote"),
            "rsm.config.chunk.size": "1000",
            "rsm.config.compression.enabled": "true",
        },
    )
    assert isinstance(manager, ChunkedRemoteStorageManager)
    return manager


def copy(
    manager: ChunkedRemoteStorageManager, data: LogSegmentData, ref: RemoteSegmentRef
) -> RemoteLogSegmentMetadata:
    metadata = closed_segment_metadata(ref, data)
    manager.copy_log_segment_data(metadata, data)
    return metadata


def store_of(manager: ChunkedRemoteStorageManager) -> LocalTieredStorage:
    assert isinstance(manager.store, LocalTieredStorage)
    return manager.store


def test_a_copied_segment_reads_back_from_its_manifest(
    tmp_path: Path, data: LogSegmentData
) -> None:
    manager = chunked(tmp_path)
    ref = segment_ref()
    metadata = copy(manager, data, ref)
    inventory = scan_bucket(store_of(manager), verify_checksums=True)
    assert inventory.topics() == {("chunked-topic", ref.topic_id): [0]}
    found = inventory.partitions[ref.topic_id_partition]
    assert [s.problems for s in found.segments] == [()]
    assert found.segments[0].metadata == metadata
    stored = sum(p.stat().st_size for p in (tmp_path / "remote").rglob("*") if p.is_file())
    assert found.segments[0].stored_bytes == stored
    plan = plan_partition(found, allow_gaps=False)
    assert (plan.log_start_offset, plan.end_offset) == (0, 79)
    assert [(e.epoch, e.start_offset) for e in plan.leader_epochs] == [(0, 0), (1, 30), (2, 60)]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("missing index", r"lists the \.index object, which is missing"),
        ("short log", r"\.log object holds \d+ bytes, its manifest says \d+"),
        ("flipped byte", r"chunk 0 of its \.log fails its checksum"),
        ("moved manifest", r"describes another segment"),
    ],
)
def test_a_segment_whose_objects_disagree_with_its_manifest_is_not_believed(
    tmp_path: Path, data: LogSegmentData, damage: str, problem: str
) -> None:
    manager = chunked(tmp_path)
    ref = segment_ref()
    copy(manager, data, ref)
    root = tmp_path / "remote"
    keys = segment_keys("", ref)
    log = root / keys[RemoteObjectSuffix.LOG]
    if damage == "missing index":
        (root / keys[RemoteObjectSuffix.OFFSET_INDEX]).unlink()
    elif damage == "short log":
        log.write_bytes(log.read_bytes()[:-1])
    elif damage == "flipped byte":
        content = bytearray(log.read_bytes())
        content[5] ^= 0xFF
        log.write_bytes(bytes(content))
    else:
        other = segment_ref(segment_id=Uuid.random())
        for suffix, key in keys.items():
            if (root / key).exists():
                target = root / segment_keys("", other)[suffix]
                (root / key).rename(target)
        # the manifest still describes the first segment
        ref = other
    inventory = scan_bucket(store_of(manager), verify_checksums=True)
    found = inventory.partitions[ref.topic_id_partition].segments
    assert len(found) == 1 and len(found[0].problems) == 1, found
    assert re.search(problem, found[0].problems[0]), found[0].problems
    plan = plan_partition(inventory.partitions[ref.topic_id_partition], allow_gaps=False)
    assert plan.segments == () and len(plan.left_out) == 1


def test_objects_without_a_manifest_are_counted_never_read(
    tmp_path: Path, data: LogSegmentData
) -> None:
    manager = chunked(tmp_path)
    plain = segment_ref()
    store_of(manager).copy_log_segment_data(plain, data)  # the plain format: no manifest
    inventory = scan_bucket(store_of(manager))
    found = inventory.partitions[plain.topic_id_partition]
    assert found.segments == [] and found.without_manifest == [plain]
    plan = plan_partition(found, allow_gaps=False)
    assert plan.segments == ()
    assert "no manifest" in plan.left_out[0].reason


def test_a_topic_and_an_incarnation_are_chosen_by_name_and_id(
    tmp_path: Path, data: LogSegmentData
) -> None:
    manager = chunked(tmp_path)
    first = segment_ref()
    second = RemoteSegmentRef(
        topic="chunked-topic",
        topic_id=Uuid.random(),
        partition=0,
        segment_id=Uuid.random(),
        start_offset=0,
    )
    copy(manager, data, first)
    copy(manager, data, second)
    store = store_of(manager)
    assert len(scan_bucket(store).topics()) == 2
    assert list(scan_bucket(store, topic_id=second.topic_id).partitions) == [
        second.topic_id_partition
    ]
    assert scan_bucket(store, topic="another").partitions == {}
