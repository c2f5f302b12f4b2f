"""``LocalTieredStorage`` variants that are slow, so a test can SIGKILL a job mid-work.

    --remote-storage-manager tests.integration.jobs.slow_storage.SlowLocalTieredStorage
    --rsm-config local.storage.dir=DIR --rsm-config slow.marker.dir=MARKERS
    --rsm-config slow.delete.sleep.ms=MS

After deleting a segment's objects it writes ``<MARKERS>/<segment id>`` and sleeps ``MS``
before returning, i.e. before ``delete_segment`` publishes DELETE_SEGMENT_FINISHED.

    --remote-storage-manager tests.integration.jobs.slow_storage.SlowCopyLocalTieredStorage
    --rsm-config local.storage.dir=DIR --rsm-config slow.copy.sleep.ms=MS

Sleeps ``MS`` after writing a segment's ``.log`` object and before its indexes: a copy
spends that long between COPY_SEGMENT_STARTED and COPY_SEGMENT_FINISHED with part of its
objects in the store (mid-upload).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from storage_core.tiered.local_tiered_storage import LocalTieredStorage, strip_rsm_prefix
from storage_core.tiered.remote_storage_manager import (
    RemoteLogSegmentMetadataLike,
    RemoteSegmentRef,
)


class SlowLocalTieredStorage(LocalTieredStorage):
    def __init__(self, storage_dir: Path, *, marker_dir: Path, sleep_ms: int) -> None:
        super().__init__(storage_dir, fsync=False)
        self.marker_dir = marker_dir
        self.sleep_ms = sleep_ms
        marker_dir.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def from_config(config: Mapping[str, str]) -> SlowLocalTieredStorage:
        plain = strip_rsm_prefix(config)
        return SlowLocalTieredStorage(
            Path(plain["local.storage.dir"]),
            marker_dir=Path(plain["slow.marker.dir"]),
            sleep_ms=int(plain.get("slow.delete.sleep.ms", "1000")),
        )

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> None:
        super().delete_log_segment_data(remote_log_segment_metadata)
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        (self.marker_dir / str(segment.segment_id)).write_text(str(segment))
        time.sleep(self.sleep_ms / 1000)


class SlowCopyLocalTieredStorage(LocalTieredStorage):
    def __init__(self, storage_dir: Path, *, sleep_ms: int) -> None:
        super().__init__(storage_dir, fsync=False)
        self.sleep_ms = sleep_ms

    @staticmethod
    def from_config(config: Mapping[str, str]) -> SlowCopyLocalTieredStorage:
        plain = strip_rsm_prefix(config)
        return SlowCopyLocalTieredStorage(
            Path(plain["local.storage.dir"]),
            sleep_ms=int(plain.get("slow.copy.sleep.ms", "1000")),
        )

    def _write_object(self, target: Path, source: Path | bytes) -> int:
        size = super()._write_object(target, source)
        if target.name.endswith(".log"):
            time.sleep(self.sleep_ms / 1000)
        return size
