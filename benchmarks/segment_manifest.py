"""What reading a chunked segment's manifest costs, by segment size and manifest version.

Every cold read of a chunked segment (the first batch a consumer asks of it, a follower's
aux-state build) parses its manifest before any record is served, so that cost is paid once
per segment per broker, by the reader waiting for its answer. The manifest lists a stored size
and a checksum per frame (256 KiB of the ``.log`` by default): a 1 GiB segment has 4,096.

For each segment size, a manifest with that many frames (random sizes and checksums, one
leader epoch, neither compressed nor encrypted) is written by both versions and parsed with
``SegmentManifest.from_bytes`` (what the broker runs):

  version 2   the frames' sizes and checksums as JSON numbers (the baseline)
  version 3   the same lists packed: base64 of big-endian 32-bit integers (what copies write)

Figures: the manifest's size in bytes and the best of ``--repeat`` timings of ``--number``
parses each, in microseconds per parse; the ratio is version 2's time over version 3's.

    python benchmarks/segment_manifest.py [--number 50] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.tiered.chunked.chunk_index import ChunkIndex
from storage_core.tiered.chunked.segment_manifest import SegmentDescription, SegmentManifest
from storage_core.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata

CHUNK_BYTES = 4 << 20
FRAME_BYTES = 256 << 10
SEGMENT_MIB = (4, 128, 1024)  # the remote_read benchmark's segments, and Kafka's default


def manifest(segment_bytes: int, *, packed: bool, seed: int = 1) -> SegmentManifest:
    frames = -(-segment_bytes // FRAME_BYTES)
    rng = random.Random(seed)  # the same frames for both versions
    index = ChunkIndex(
        chunk_size=CHUNK_BYTES,
        frame_size=FRAME_BYTES,
        framed=True,
        original_size=segment_bytes,
        stored_sizes=tuple(rng.randint(FRAME_BYTES // 2, FRAME_BYTES + 64) for _ in range(frames)),
        checksums=tuple(rng.getrandbits(32) for _ in range(frames)),
    )
    tip = TopicIdPartition(Uuid.random(), TopicPartition("orders", 0))
    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=tip, id=Uuid.random()),
        start_offset=0,
        end_offset=segment_bytes // 1024 - 1,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=0,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=segment_bytes,
        segment_leader_epochs={0: 0},
    )
    return SegmentManifest(
        chunk_index=index,
        compression=False,
        encryption=None,
        objects={},
        description=SegmentDescription(metadata=metadata, leader_epochs=(EpochEntry(0, 0),)),
        packed_frames=packed,
    )


def parse_us(content: bytes, number: int, repeat: int) -> float:
    timings = timeit.repeat(
        lambda: SegmentManifest.from_bytes(content, where="benchmark"), number=number, repeat=repeat
    )
    return round(min(timings) / number * 1e6, 1)


def run(
    number: int, repeat: int, segment_mib: tuple[int, ...] = SEGMENT_MIB
) -> list[dict[str, int | float]]:
    rows = []
    for mib in segment_mib:
        versions = {}
        for packed in (False, True):
            written = manifest(mib << 20, packed=packed)
            content = written.to_bytes()
            if SegmentManifest.from_bytes(content, where="benchmark") != written:
                raise SystemExit(f"version {written.version} did not read back what it wrote")
            versions[written.version] = (len(content), parse_us(content, number, repeat))
        (old_bytes, old_us), (new_bytes, new_us) = versions[2], versions[3]
        rows.append(
            {
                "segment_mib": mib,
                "frames": -(-(mib << 20) // FRAME_BYTES),
                "v2_bytes": old_bytes,
                "v3_bytes": new_bytes,
                "v2_parse_us": old_us,
                "v3_parse_us": new_us,
                "ratio": round(old_us / new_us, 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for row in run(args.number, args.repeat):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
