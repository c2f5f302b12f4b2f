"""Named errors of the remote log metadata layer (KIP-405 RLMM).

Each says what was wrong and what to do about it; ``error_code`` is the Kafka protocol error
a client sees if one reaches a request handler.
"""

from __future__ import annotations

from typing import ClassVar

from storage_core.errors import StorageError


class CorruptRemoteLogMetadataError(StorageError):
    """Bytes that should hold a ``__remote_log_metadata`` record (or a snapshot entry) do not.

    Raised by ``RemoteLogMetadataSerde.deserialize`` for a truncated value, an unknown frame
    version, api key or record version, a field out of range, or trailing bytes. The record
    was not written by a Kafka-compatible RLMM; skip it only after inspecting it.
    """

    error_code: ClassVar[str] = "corrupt_message"


class CorruptRemoteLogMetadataSnapshotError(CorruptRemoteLogMetadataError):
    """A ``remote_log_snapshot`` file failed its checks (header, CRC, lengths, entry count).

    The snapshot is only a shortcut: discard it and rebuild the partition's cache by reading
    ``__remote_log_metadata`` from the beginning.
    """

    error_code: ClassVar[str] = "kafka_storage_error"


class IllegalRemoteLogStateTransitionError(StorageError):
    """An event asks for a state change that the segment or partition state machine forbids.

    Kafka's ``RemoteLogMetadataCache`` logs and drops such an event; here it is refused with
    this error so that the caller decides (a consumer of the metadata topic logs and skips it,
    a writer has a bug to fix). The cache is unchanged when this is raised.
    """

    error_code: ClassVar[str] = "invalid_request"


class RemoteResourceNotFoundError(StorageError):
    """Kafka's ``RemoteResourceNotFoundException``: no metadata for the given remote segment.

    Raised when an update names a segment the cache does not hold (never added, or already
    DELETE_SEGMENT_FINISHED). Publish the segment's COPY_SEGMENT_STARTED metadata first.
    """

    error_code: ClassVar[str] = "kafka_storage_error"
