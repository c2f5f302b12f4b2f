"""Named errors of the topic-based remote log metadata manager.

Each says what was wrong and what to do about it; ``error_code`` is the Kafka protocol error a
client would see if one reached a request handler.
"""

from __future__ import annotations

from typing import ClassVar

from storage_core.errors import StorageError


class RemoteLogMetadataPublishError(StorageError):
    """An event could not be appended to ``__remote_log_metadata`` (not leader, not enough
    replicas, timeout, broker unreachable). Nothing is known to be written: retry the
    publish (a repeated event is idempotent for the cache)."""

    error_code: ClassVar[str] = "kafka_storage_error"


class RemoteLogMetadataConsumeTimeoutError(StorageError):
    """A published event is durable on ``__remote_log_metadata`` but this manager's consumer
    did not apply it within ``remote.log.metadata.consume.wait.ms``. The event is not lost;
    check that the metadata partition is readable and its consumer running, or raise the
    wait."""

    error_code: ClassVar[str] = "request_timed_out"


class RemoteLogMetadataNotReadyError(StorageError):
    """The partition's cache has not yet caught up with its metadata partition (Kafka's
    "Remote log metadata cache is not initialized"). Retry once ``is_ready`` is true."""

    error_code: ClassVar[str] = "kafka_storage_error"


class RemoteLogMetadataManagerClosedError(StorageError):
    """The manager was closed; build a new one to publish or query again."""

    error_code: ClassVar[str] = "kafka_storage_error"


class BlockingCallOnEventLoopError(StorageError):
    """A blocking publish was called on the broker's asyncio loop thread, where it would
    stall every connection (and deadlock: the append it waits for runs on that loop).
    Call it from a thread: ``await asyncio.to_thread(rlmm.add_remote_log_segment_metadata,
    metadata)``."""

    error_code: ClassVar[str] = "unknown_server_error"
