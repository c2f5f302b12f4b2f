"""Which ``__remote_log_metadata`` partition holds a user partition's events.

Kafka's ``RemoteLogMetadataTopicPartitioner.metadataPartition``::

    hash      = Objects.hash(topicId.leastSignificantBits, topicId.mostSignificantBits, partition)
              = 31 * (31 * (31 * 1 + Long.hashCode(least)) + Long.hashCode(most)) + partition
                (int32 arithmetic; Long.hashCode(v) = (int) (v ^ (v >>> 32)))
    key       = the 4 big-endian bytes of hash
    partition = Utils.toPositive(Utils.murmur2(key)) % numMetadataTopicPartitions

The topic name plays no part (the KIP's ``tp.toString()`` was an earlier draft), so a
re-created topic of the same name lands elsewhere. ``murmur2`` is Kafka's ``Utils.murmur2``
(the default producer partitioner's hash): MurmurHash2, 32 bits, seed 0x9747b28c.
"""

from __future__ import annotations

from storage_core.common import TopicIdPartition

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF

DEFAULT_REMOTE_LOG_METADATA_TOPIC_PARTITIONS = 50
"""``remote.log.metadata.topic.num.partitions`` default."""


def _to_int32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit MurmurHash2 of ``data``."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & _MASK32
        k ^= k >> 24
        k = (k * m) & _MASK32
        h = (h * m) & _MASK32
        h ^= k
    remaining = length % 4
    if remaining == 3:
        h ^= data[whole + 2] << 16
    if remaining >= 2:
        h ^= data[whole + 1] << 8
    if remaining >= 1:
        h ^= data[whole]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of an int32."""
    return number & 0x7FFFFFFF


def _long_hash_code(value: int) -> int:
    unsigned = value & _MASK64
    return _to_int32(unsigned ^ (unsigned >> 32))


def topic_id_partition_hash(topic_id_partition: TopicIdPartition) -> int:
    """Java's ``Objects.hash(least, most, partition)`` of the partition's topic id."""
    result = 1
    for element in (
        _long_hash_code(topic_id_partition.topic_id.least_significant_bits),
        _long_hash_code(topic_id_partition.topic_id.most_significant_bits),
        topic_id_partition.topic_partition.partition,
    ):
        result = _to_int32(31 * result + element)
    return result


class RemoteLogMetadataTopicPartitioner:
    """Maps a user partition to its metadata partition; immutable and thread-safe."""

    __slots__ = ("num_metadata_topic_partitions",)

    def __init__(self, num_metadata_topic_partitions: int) -> None:
        if num_metadata_topic_partitions <= 0:
            raise ValueError(
                "the number of __remote_log_metadata partitions must be positive,"
                f" got {num_metadata_topic_partitions}"
            )
        self.num_metadata_topic_partitions = num_metadata_topic_partitions

    def metadata_partition(self, topic_id_partition: TopicIdPartition) -> int:
        """The metadata partition in ``[0, num_metadata_topic_partitions)`` (exclusive)."""
        key = (topic_id_partition_hash(topic_id_partition) & _MASK32).to_bytes(4, "big")
        return to_positive(murmur2(key)) % self.num_metadata_topic_partitions
