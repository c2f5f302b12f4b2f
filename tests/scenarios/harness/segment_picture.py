"""The tiered stories' picture of one partition (after Kafka's tiered storage integration
tests), in pieces each stage puts together::

    local: [20-29][30-34]* remote: [0-9][10-19][20-29] | earliest=0 local=20 tiered=29 end=35

- a replica's segment files: ``[base-last]`` (both inclusive), the active segment starred
  and shown ``[base-]*`` while empty; files renamed for deletion left out;
- the remote segments: the COPY_SEGMENT_FINISHED segments a fresh client-mode RLMM lists,
  which must be exactly the segments whose objects the store holds, each with its ``.log``
  (nothing orphaned, nothing missing);
- the ListOffsets v9 answers: ``earliest`` (-2, the log start offset), ``local`` (-4, the
  local log start offset), ``tiered`` (-5, highest copied offset, -1 for none) and ``end``
  (-1, the high watermark).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from storage_core.common import TopicIdPartition, Uuid
from storage_core.log import log_file_utils as files
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, parse_object_key
from storage_core.tiered.topic_based_rlmm import (
    ConsumerTaskConfig,
    TopicBasedRemoteLogMetadataManager,
)
from tests.tiered_broker_support import EARLIEST, EARLIEST_LOCAL, LATEST_TIERED

_ACTIVE_LOG = re.compile(r"^\d{20}\.log$")


def local_segments(log_dir: Path, topic: str, partition: int) -> list[int] | None:
    """Base offsets of the partition's segment files (None: no partition directory)."""
    directory = log_dir / f"{topic}-{partition}"
    if not directory.is_dir():
        return None
    return sorted(
        files.offset_from_file_name(name)
        for name in os.listdir(directory)
        if _ACTIVE_LOG.match(name)
    )


def render_local(bases: list[int], end: int) -> str:
    """``[base-last]`` per segment, the last (active) one starred; '' for none."""
    local = []
    for i, base in enumerate(bases):
        if i + 1 < len(bases):
            local.append(f"[{base}-{bases[i + 1] - 1}]")
        else:
            local.append(f"[{base}-{end - 1}]*" if end > base else f"[{base}-]*")
    return "".join(local)


def finished_segments(bootstrap: str, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    """The COPY_SEGMENT_FINISHED segments a fresh client-mode RLMM lists, by start offset."""
    with TopicBasedRemoteLogMetadataManager.for_client(
        bootstrap, consumer_config=ConsumerTaskConfig(idle_poll_ms=10)
    ) as rlmm:
        listed = list(rlmm.list_remote_log_segments(tip))
    return sorted(
        (m for m in listed if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
        key=lambda m: m.start_offset,
    )


def stored_segments(
    keys: Iterable[str], prefix: str, topic_id: Uuid, topic: str, partition: int
) -> list[tuple[int, Uuid]]:
    """(base offset, segment id) of the partition's segments with any object among the
    store's ``keys``; each one must have its ``.log``."""
    objects: dict[tuple[int, Uuid], set[RemoteObjectSuffix]] = {}
    for key in keys:
        if key.endswith("/topic-manifest.json"):
            continue  # the topic's manifest, no segment's object
        parsed = parse_object_key(key, prefix)
        segment = parsed.segment
        if (segment.topic, segment.partition, segment.topic_id) == (topic, partition, topic_id):
            found = objects.setdefault((segment.start_offset, segment.segment_id), set())
            found.add(parsed.suffix)
    for segment_key, suffixes in objects.items():
        assert RemoteObjectSuffix.LOG in suffixes, (segment_key, suffixes)
    return sorted(objects)


def remote_ranges(
    finished: list[RemoteLogSegmentMetadata], stored: list[tuple[int, Uuid]]
) -> list[tuple[int, int]]:
    """(start, end) (inclusive) of the ``finished`` segments, which must be exactly the
    ``stored`` ones."""
    assert stored == sorted((m.start_offset, m.remote_log_segment_id.id) for m in finished)
    return [(m.start_offset, m.end_offset) for m in finished]


def render_remote(ranges: list[tuple[int, int]]) -> str:
    return "".join(f"[{start}-{end}]" for start, end in ranges) or "-"


def render_offsets(list_offset: Callable[[int], int], end: int) -> str:
    """The ListOffsets answers, asked in this order, ``end`` already known."""
    return (
        f"earliest={list_offset(EARLIEST)}"
        f" local={list_offset(EARLIEST_LOCAL)}"
        f" tiered={list_offset(LATEST_TIERED)} end={end}"
    )
