"""What a broker answers about a partition: its own Metadata (read with raw frames, no
client-side caching) and ListOffsets v9 from the partition's leader, with Kafka's special
timestamps."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v9 import request as list_v9
from kio.schema.list_offsets.v9.response import ListOffsetsResponse as ListOffsetsResponseV9
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from storage_core.client import KafkaCluster
from storage_core.common import TopicPartition
from tests import cluster_support

# ListOffsets timestamps: the log start offset, the local log start offset, the highest
# offset copied to remote storage (-1 for none) and the high watermark.
EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST = -2, -4, -5, -1
NO_EPOCH = -1


def metadata_leader(bootstrap: str, topic: str) -> tuple[int, int]:
    """(leader, error code) of partition 0 in one broker's own Metadata answer."""
    (answer,) = cluster_support.metadata(bootstrap, topic).topics
    (partition,) = answer.partitions
    return int(partition.leader_id), int(partition.error_code.value)


def list_offset(bootstrap: str, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    """ListOffsets v9 to the partition's leader: (offset, leader epoch); the answer must
    carry no error."""
    with KafkaCluster(bootstrap) as cluster:
        session = cluster.leader_session(TopicPartition(topic, partition))
        response = session.send(
            list_v9.ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=i8(0),
                topics=(
                    list_v9.ListOffsetsTopic(
                        name=TopicName(topic),
                        partitions=(
                            list_v9.ListOffsetsPartition(
                                partition_index=i32(partition),
                                current_leader_epoch=i32(-1),
                                timestamp=i64(timestamp),
                            ),
                        ),
                    ),
                ),
            ),
            ListOffsetsResponseV9,
        )
    (answer,) = response.topics[0].partitions
    assert answer.error_code == ErrorCode.none, (topic, partition, answer.error_code)
    return int(answer.offset), int(answer.leader_epoch)
