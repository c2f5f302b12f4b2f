"""``storage-core remote-log-metadata dump`` on a tier copied in the chunked format (a broker
process, ``tests/chunked_broker_support``): each COPY_SEGMENT_FINISHED line says so, with the
stored size of the segment's objects as listed in the store."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from storage_core.tiered.remote_object_keys import RemoteObjectSuffix
from tests.chunked_broker_support import chunked_tier

pytestmark = pytest.mark.timeout(180)


def test_finished_segments_show_the_chunked_format_and_stored_size(tmp_path: Path) -> None:
    with chunked_tier(tmp_path) as tier:
        result = subprocess.run(
            [sys.executable, "-m", "storage_core.cli", "remote-log-metadata", "dump",
             "--bootstrap-server", tier.broker.bootstrap, "--from-beginning",
             "--timeout-ms", "500"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        lines = result.stdout.splitlines()
        for metadata in tier.copied:
            segment_id = str(metadata.remote_log_segment_id.id)
            (finished,) = [
                line for line in lines if segment_id in line and "COPY_SEGMENT_FINISHED" in line
            ]
            stored = sum(
                tier.object_path(metadata, suffix).stat().st_size
                for suffix in RemoteObjectSuffix
                if tier.object_path(metadata, suffix).exists()
            )
            assert re.search(
                rf",remote-format:chunked,remote-format-version:3,"
                rf"remote-stored-size-in-bytes:{stored},remote-log-segment-state:",
                finished,
            ), finished
            (started,) = [line for line in lines if segment_id in line and "STARTED" in line]
            assert "remote-format" not in started  # the copy's custom metadata comes at the end
