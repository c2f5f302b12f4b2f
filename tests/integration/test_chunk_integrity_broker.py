"""A damaged chunk of a remote segment, as a broker process and its clients see it.

Story::

    300 records, copied chunked (1 KiB chunks, zstd, AES-256-GCM); local retention
                                      local: [seg j..k][active]  remote: seg 0..k
    one stored byte of chunk 2 of seg 0 flipped (same size: only its CRC32C tells)
      fetch offsets inside seg 0, 5 times     KAFKA_STORAGE_ERROR, no record bytes
      fetch the first offset of seg 1         records (only the damaged segment fails)
      broker log                              one WARN naming the partition, the segment,
                                              the .log chunk and the fetch offset
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.chunked_broker_support import MARKER, TOPIC, chunked_tier
from tests.tiered_broker_support import batch_offsets, raw_fetch

pytestmark = pytest.mark.timeout(180)

FETCHES = 5


def test_a_chunk_failing_its_checksum_answers_storage_error_and_warns_once(
    tmp_path: Path,
) -> None:
    with chunked_tier(tmp_path) as tier:
        damaged, following = tier.copied[0], tier.copied[1]
        assert len(tier.manifest(damaged).chunk_index) > 3
        tier.corrupt_chunk(damaged, 2)
        port = tier.broker.port

        for offset in range(FETCHES):
            result = raw_fetch(port, TOPIC, offset)
            assert result.error_code == ErrorCode.kafka_storage_error, (offset, result)
            assert MARKER not in result.records

        served = raw_fetch(port, TOPIC, following.start_offset)
        assert served.error_code == ErrorCode.none
        assert batch_offsets(served.records)[0] == following.start_offset
        assert MARKER in served.records

        log = tier.broker.output_path.read_text(errors="replace")
        warnings = [line for line in log.splitlines() if "remote segment damaged" in line]
        assert len(warnings) == 1, warnings
        (warning,) = warnings
        assert "WARNING" in warning
        assert f"partition={TOPIC}-0" in warning
        assert "fetch_offset=0" in warning
        assert str(damaged.remote_log_segment_id.id) in warning
        assert ".log chunk 2" in warning
        assert "CRC32C" in warning
