"""Stores that restore slowly, so a test can SIGKILL ``jobs.restore_topic`` or stop the
object store between two segments of a restore.

    --remote-storage-manager tests.integration.restore_slow_storage.SlowRestoreLocalTieredStorage
    --rsm-config local.storage.dir=DIR --rsm-config slow.restore.sleep.ms=MS

    --remote-storage-manager tests.integration.restore_slow_storage.SlowRestoreS3Storage
    --rsm-config s3.bucket.name=... (the S3 settings) --rsm-config slow.restore.sleep.ms=MS

Each sleeps ``MS`` before copying a segment's objects (``restore_segment_objects``): the
restore spends that long between one segment published and the next one's copy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from storage_core.tiered.local_tiered_storage import LocalTieredStorage, strip_rsm_prefix
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from storage_core.tiered.s3_remote_storage_manager import (
    S3RemoteStorageConfig,
    S3RemoteStorageManager,
)

SLEEP_KEY = "slow.restore.sleep.ms"


def _sleep_ms(config: Mapping[str, str]) -> int:
    return int(strip_rsm_prefix(config).get(SLEEP_KEY, "500"))


def _without_sleep(config: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if not k.endswith(SLEEP_KEY)}


class SlowRestoreLocalTieredStorage(LocalTieredStorage):
    def __init__(self, storage_dir: Path, *, sleep_ms: int) -> None:
        super().__init__(storage_dir, fsync=False)
        self.sleep_ms = sleep_ms

    @staticmethod
    def from_config(config: Mapping[str, str]) -> SlowRestoreLocalTieredStorage:
        plain = strip_rsm_prefix(config)
        return SlowRestoreLocalTieredStorage(
            Path(plain["local.storage.dir"]), sleep_ms=_sleep_ms(config)
        )

    def restore_segment_objects(
        self,
        source: RemoteSegmentRef,
        target: RemoteSegmentRef,
        suffixes: Sequence[RemoteObjectSuffix],
        manifest: bytes,
    ) -> int:
        time.sleep(self.sleep_ms / 1000)
        return super().restore_segment_objects(source, target, suffixes, manifest)


class SlowRestoreS3Storage(S3RemoteStorageManager):
    sleep_ms = 500

    @staticmethod
    def from_config(config: Mapping[str, str]) -> SlowRestoreS3Storage:
        storage = SlowRestoreS3Storage(S3RemoteStorageConfig.from_config(_without_sleep(config)))
        storage.sleep_ms = _sleep_ms(config)
        return storage

    def restore_segment_objects(
        self,
        source: RemoteSegmentRef,
        target: RemoteSegmentRef,
        suffixes: Sequence[RemoteObjectSuffix],
        manifest: bytes,
    ) -> int:
        time.sleep(self.sleep_ms / 1000)
        return super().restore_segment_objects(source, target, suffixes, manifest)
