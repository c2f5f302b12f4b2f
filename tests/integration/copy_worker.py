"""A tiering copy run in its own process, so that a test can SIGKILL it mid-copy.

    python -m tests.integration.copy_worker --bootstrap HOST:PORT --partition-dir DIR \\
        --topic T --rsm-config JSON [--hang-after-first-object MARKER]

Copies the partition's eligible segments with the operations library, a client-mode RLMM and
``S3RemoteStorageManager`` built from ``--rsm-config`` (credentials from the environment).
With ``--hang-after-first-object`` the RSM touches ``MARKER`` once the first object of the
first segment is uploaded, then sleeps: the segment sits between COPY_SEGMENT_STARTED and
COPY_SEGMENT_FINISHED until the process is killed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from storage_core.tiered.s3_remote_storage_config import S3RemoteStorageConfig
from storage_core.tiered.s3_remote_storage_manager import S3RemoteStorageManager
from tests.tiered_broker_support import client_rlmm, copy_eligible_segments

HANG_S = 600.0


class HangingS3RemoteStorageManager(S3RemoteStorageManager):
    """Hangs after its first uploaded object, having touched ``marker``."""

    def __init__(self, config: S3RemoteStorageConfig, *, marker: Path) -> None:
        super().__init__(config)
        self._marker = marker

    def _upload_file(self, key: str, path: Path) -> int:
        size = super()._upload_file(key, path)
        self._marker.write_text(key)
        time.sleep(HANG_S)
        return size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--partition-dir", type=Path, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rsm-config", required=True)
    parser.add_argument("--hang-after-first-object", type=Path)
    args = parser.parse_args(argv)
    config = S3RemoteStorageConfig.from_config(json.loads(args.rsm_config))
    rsm: S3RemoteStorageManager
    if args.hang_after_first_object is not None:
        rsm = HangingS3RemoteStorageManager(config, marker=args.hang_after_first_object)
    else:
        rsm = S3RemoteStorageManager(config)
    with client_rlmm(args.bootstrap) as rlmm:
        copied = copy_eligible_segments(args.bootstrap, args.partition_dir, args.topic, rsm, rlmm)
    print(json.dumps([str(m.remote_log_segment_id.id) for m in copied]))


if __name__ == "__main__":
    main()
