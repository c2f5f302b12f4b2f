"""The topic-based ``RemoteLogMetadataManager`` (KIP-405; Kafka's class of the same name).

Modules, bottom up:

- ``config``: the topic's name and configs, defaults and limits.
- ``errors``: publish, consume-timeout, not-ready, closed and event-loop errors.
- ``committed_offsets``: ``_rlmm_committed_offsets``, how far each metadata partition was read.
- ``readers``: metadata records from the broker's local logs or over the Kafka protocol.
- ``publishers``: events appended through the ``ReplicaManager`` or a ``KafkaProducer``.
- ``consumer_task``: ``ConsumerTask``, the thread that applies events to the caches,
  snapshots them and waits for read-your-writes.
- ``manager``: ``TopicBasedRemoteLogMetadataManager`` (broker mode and client mode).
- ``host_broker``: what broker mode needs of the broker it runs in (``HostBroker`` and its
  parts, protocols; no import of it).
- ``broker_setup``: topic creation and start/stop inside ``KafkaBroker``.
"""

from storage_core.tiered.topic_based_rlmm.committed_offsets import (
    COMMITTED_OFFSETS_FILE_NAME,
    CommittedOffsetsFile,
)
from storage_core.tiered.topic_based_rlmm.config import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ConsumerTaskConfig,
    metadata_topic_configs,
)
from storage_core.tiered.topic_based_rlmm.consumer_task import ConsumerTask
from storage_core.tiered.topic_based_rlmm.errors import (
    BlockingCallOnEventLoopError,
    RemoteLogMetadataConsumeTimeoutError,
    RemoteLogMetadataManagerClosedError,
    RemoteLogMetadataNotReadyError,
    RemoteLogMetadataPublishError,
)
from storage_core.tiered.topic_based_rlmm.manager import TopicBasedRemoteLogMetadataManager
from storage_core.tiered.topic_based_rlmm.readers import (
    ClientMetadataReader,
    LocalLogMetadataReader,
    MetadataRead,
    MetadataRecord,
)

__all__ = [
    "COMMITTED_OFFSETS_FILE_NAME",
    "REMOTE_LOG_METADATA_TOPIC_NAME",
    "BlockingCallOnEventLoopError",
    "ClientMetadataReader",
    "CommittedOffsetsFile",
    "ConsumerTask",
    "ConsumerTaskConfig",
    "LocalLogMetadataReader",
    "MetadataRead",
    "MetadataRecord",
    "RemoteLogMetadataConsumeTimeoutError",
    "RemoteLogMetadataManagerClosedError",
    "RemoteLogMetadataNotReadyError",
    "RemoteLogMetadataPublishError",
    "TopicBasedRemoteLogMetadataManager",
    "metadata_topic_configs",
]
