"""Executing planned deletions of remote objects on Spark executors, for the jobs that delete
(``delete_partitions``, ``reconcile``).

A job plans on the driver and hands this module one ``DeletionItem`` per unit of work:

    segment item   the segment's metadata (``RemoteLogMetadataSerde`` bytes) and the states
                   it may be in: the task re-reads the segment's current state and, if it is
                   still allowed, runs ``delete_segment`` (DELETE_SEGMENT_STARTED -> objects
                   deleted -> DELETE_SEGMENT_FINISHED); a segment another run finished only
                   has its objects deleted again; one whose state moved on is skipped
    orphan item    object keys of one dead segment: deleted only if no live metadata names
                   that segment when the task runs

``run_on_executors`` spreads the items over a few Spark tasks (``task_count``), each with its
own client-mode RLMM and remote storage manager (``StoreSettings``), and returns one
``DeletionOutcome`` per item, in the order of the items; a failing item is reported in its
outcome, never raised, and the next run retries it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobs.common.clients import remote_log_metadata_client
from jobs.common.settings import StoreSettings
from storage_core.clock import SYSTEM_CLOCK
from storage_core.common import TopicIdPartition, Uuid
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.errors import RemoteResourceNotFoundError
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations import delete_segment
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_object_keys import InvalidRemoteObjectKeyError, parse_object_key
from storage_core.tiered.remote_storage_manager import RemoteStorageManager, remote_object_store

# The run's broker id of a run whose every item names its own broker (``DeletionItem``).
NO_RUN_BROKER_ID = -1
# Spark tasks per run: each opens one RLMM and one remote storage manager.
TASKS_PER_CORE = 2
TASKS_MAX = 64


def task_count(items: int, cores: int) -> int:
    """Spark tasks for ``items`` work items: a couple per core, never more than items."""
    return max(1, min(items, max(1, cores) * TASKS_PER_CORE, TASKS_MAX))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionItem:
    """One unit of executor work: a segment (its metadata as ``RemoteLogMetadataSerde``
    bytes) to delete if its current state is one of ``allowed_states``, or orphaned object
    ``keys`` of segment ``segment_id`` of ``partition`` to delete if no live metadata names
    that segment."""

    reason: str
    metadata_bytes: bytes | None = None
    allowed_states: tuple[int, ...] = ()
    keys: tuple[str, ...] = ()
    key_prefix: str = ""
    # The broker a segment's events are published as; None: the run's (``StoreSettings``).
    broker_id: int | None = None

    @staticmethod
    def for_segment(
        metadata: RemoteLogSegmentMetadata,
        *,
        reason: str,
        allowed_states: Iterable[RemoteLogSegmentState] = tuple(RemoteLogSegmentState),
        broker_id: int | None = None,
    ) -> DeletionItem:
        return DeletionItem(
            reason=reason,
            metadata_bytes=serde.serialize(metadata),
            allowed_states=tuple(int(s) for s in allowed_states),
            broker_id=broker_id,
        )

    @staticmethod
    def for_orphans(keys: Sequence[str], *, key_prefix: str, reason: str) -> DeletionItem:
        return DeletionItem(reason=reason, keys=tuple(keys), key_prefix=key_prefix)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionOutcome:
    """What an executor did with one item. ``status``: ``deleted`` (went through its
    transitions), ``already_deleted`` (another run finished it; its objects were deleted
    again), ``skipped`` (its state moved on, or the orphan's segment is live now), ``error``."""

    partition: str
    segment_id: str
    status: str
    size_bytes: int = 0
    objects: int = 0
    detail: str = ""
    seconds: float = 0.0


def delete_on_executor(
    settings: StoreSettings, items: Iterable[DeletionItem]
) -> Iterator[DeletionOutcome]:
    """The body of one Spark task (``mapPartitions``): one RLMM and one RSM for its items."""
    batch = list(items)
    if not batch:
        return
    rsm = settings.remote_storage_manager()
    try:
        with remote_log_metadata_client(settings) as rlmm:
            yield from delete_items(batch, rsm=rsm, rlmm=rlmm, broker_id=settings.broker_id)
    finally:
        rsm.close()


def delete_items(
    items: Iterable[DeletionItem],
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
) -> Iterator[DeletionOutcome]:
    """One outcome per item, in order; a failing item is reported, never raised."""
    for item in items:
        started = time.monotonic()
        if item.metadata_bytes is not None:
            outcome = _delete_segment_item(item, rsm=rsm, rlmm=rlmm, broker_id=broker_id)
        else:
            outcome = _delete_orphan_item(item, rsm=rsm, rlmm=rlmm)
        yield DeletionOutcome(
            partition=outcome.partition,
            segment_id=outcome.segment_id,
            status=outcome.status,
            size_bytes=outcome.size_bytes,
            objects=outcome.objects,
            detail=outcome.detail,
            seconds=round(time.monotonic() - started, 3),
        )


def _delete_segment_item(
    item: DeletionItem,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
) -> DeletionOutcome:
    if item.metadata_bytes is None:
        raise ValueError("a segment item needs its metadata")
    listed = serde.deserialize(item.metadata_bytes)
    if not isinstance(listed, RemoteLogSegmentMetadata):
        raise ValueError(f"a segment item holds {type(listed).__name__}, not segment metadata")
    tip = listed.topic_id_partition
    segment_id = listed.remote_log_segment_id.id
    where = {"partition": str(tip), "segment_id": str(segment_id)}
    if item.broker_id is not None:
        broker_id = item.broker_id
    if broker_id < 0:
        detail = (
            "no broker id to publish the segment's events as (neither the item's nor the run's)"
        )
        return _outcome(where, status="error", detail=detail)
    try:
        current = {m.remote_log_segment_id.id: m for m in rlmm.list_remote_log_segments(tip)}.get(
            segment_id
        )
        if current is None:
            # DELETE_SEGMENT_FINISHED already (another run): make sure no object is left.
            rsm.delete_log_segment_data(listed)
            return _outcome(where, status="already_deleted")
        if int(current.state) not in item.allowed_states:
            return _outcome(
                where,
                status="skipped",
                detail=f"state is now {current.state.name}",
            )
        delete_segment(
            current,
            rsm=rsm,
            rlmm=rlmm,
            broker_id=broker_id,
            clock=SYSTEM_CLOCK,
            reason=item.reason,
        )
    except RemoteResourceNotFoundError:
        # A concurrent run published DELETE_SEGMENT_FINISHED between our read and our event.
        return _outcome(where, status="already_deleted")
    except Exception as exc:  # reported per segment; the next run retries it
        return _outcome(where, status="error", detail=f"{type(exc).__name__}: {exc}")
    return _outcome(where, status="deleted", size_bytes=listed.segment_size_in_bytes)


def _delete_orphan_item(
    item: DeletionItem, *, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager
) -> DeletionOutcome:
    try:
        parsed = [parse_object_key(key, item.key_prefix) for key in item.keys]
    except InvalidRemoteObjectKeyError as exc:
        return DeletionOutcome(partition="-", segment_id="-", status="error", detail=str(exc))
    segments = {p.segment.segment_id: p.segment.topic_id_partition for p in parsed}
    where = {
        "partition": ",".join(sorted({str(t) for t in segments.values()})),
        "segment_id": ",".join(sorted(str(s) for s in segments)),
    }
    try:
        for segment_id, tip in segments.items():
            if _is_listed(rlmm, tip, segment_id):
                return _outcome(where, status="skipped", detail="the segment has live metadata now")
        remote_object_store(rsm, "deleting orphaned objects").delete_objects(item.keys)
    except Exception as exc:  # reported per item; the next run retries it
        return _outcome(where, status="error", detail=f"{type(exc).__name__}: {exc}")
    return _outcome(where, status="deleted", objects=len(item.keys))


def _outcome(
    where: Mapping[str, str],
    *,
    status: str,
    size_bytes: int = 0,
    objects: int = 0,
    detail: str = "",
) -> DeletionOutcome:
    return DeletionOutcome(
        partition=where["partition"],
        segment_id=where["segment_id"],
        status=status,
        size_bytes=size_bytes,
        objects=objects,
        detail=detail,
    )


def _is_listed(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, segment_id: Uuid) -> bool:
    return any(m.remote_log_segment_id.id == segment_id for m in rlmm.list_remote_log_segments(tip))


def run_on_executors(
    spark: Any, settings: StoreSettings, items: Sequence[DeletionItem]
) -> list[DeletionOutcome]:
    """Spread ``items`` over Spark tasks and collect one outcome per item, in the order of
    ``items`` (``parallelize`` slices keep it and ``collect`` concatenates the slices)."""
    if not items:
        return []
    context = spark.sparkContext
    slices = task_count(len(items), int(context.defaultParallelism))
    rdd = context.parallelize(list(items), slices)
    outcomes: list[DeletionOutcome] = rdd.mapPartitions(
        lambda part: delete_on_executor(settings, part)
    ).collect()
    if len(outcomes) != len(items):
        raise RuntimeError(
            f"{len(items)} deletions sent to the executors, {len(outcomes)} answered"
        )
    return outcomes
