"""Errors of the Kafka protocol client.

Each says what went wrong and what to do about it. ``BrokerResponseError`` carries the
protocol error the broker answered with (``kio.schema.errors.ErrorCode``) so that callers can
branch on it (``UNKNOWN_TOPIC_OR_PARTITION``, ``NOT_LEADER_OR_FOLLOWER``...).
"""

from __future__ import annotations

from typing import ClassVar

from kio.schema.errors import ErrorCode

from storage_core.errors import StorageError


class ClientError(StorageError):
    """Base class of the client's errors."""


class BrokerUnreachableError(ClientError):
    """No TCP connection to the broker could be made (refused, unresolvable, timed out)."""

    error_code: ClassVar[str] = "network_exception"


class ConnectionClosedError(ClientError):
    """The broker closed the connection before the response was complete."""

    error_code: ClassVar[str] = "network_exception"


class RequestTimeoutError(ClientError):
    """The broker did not answer within the request timeout; the connection is closed."""

    error_code: ClassVar[str] = "request_timed_out"


class ProtocolMismatchError(ClientError):
    """The bytes received are not the expected response (framing, correlation id, decoding).

    Usually the peer is not a Kafka broker, or it speaks a version of an API differently
    than announced. The connection is closed since its byte stream cannot be trusted.
    """

    error_code: ClassVar[str] = "corrupt_message"


class ResponseTooLargeError(ProtocolMismatchError):
    """A response announces more bytes than the connection's ``max_response_bytes``."""


class UnsupportedVersionError(ClientError):
    """The broker supports no version of an API that this client implements."""

    error_code: ClassVar[str] = "unsupported_version"


class BrokerResponseError(ClientError):
    """The broker answered with a protocol error for a resource (topic, partition, config).

    ``error`` is the protocol error; ``resource`` names what it was about (``topic``,
    ``topic-0``); ``broker_message`` is the broker's own explanation when it sent one.
    """

    def __init__(
        self,
        error: ErrorCode,
        *,
        resource: str,
        broker_message: str | None = None,
        operation: str | None = None,
    ):
        """``operation``: the ACL operation the request needed (``Write`` for a produce...),
        named in the message when the broker denied it."""
        text = f"{resource}: {error.name.upper()}"
        if broker_message:
            text += f" ({broker_message})"
        denied = _acl_hint(error, resource, operation)
        hint = denied or _HINTS.get(error)
        if hint and (denied or not broker_message):
            text += f"; {hint}"
        super().__init__(text)
        self.error = error
        self.resource = resource
        self.broker_message = broker_message
        self.operation = operation

    @property
    def retriable(self) -> bool:
        return bool(self.error.retriable)


_HINTS: dict[ErrorCode, str] = {
    ErrorCode.unknown_topic_or_partition: "the topic or partition does not exist",
    ErrorCode.invalid_topic_exception: (
        "topic names use ASCII letters, digits, '.', '_' and '-' (at most 249 characters)"
    ),
    ErrorCode.topic_already_exists: "choose another name or delete the topic first",
    ErrorCode.offset_out_of_range: "list the earliest and latest offsets and fetch within them",
    ErrorCode.not_leader_or_follower: "the partition moved; refresh metadata and retry",
    ErrorCode.invalid_config: "check the config name and value",
}


# Kafka's authorization errors, with the resource type and the acls tool's option for it.
_DENIED: dict[ErrorCode, tuple[str, str]] = {
    ErrorCode.topic_authorization_failed: ("topic", "--topic <name>"),
    ErrorCode.group_authorization_failed: ("group", "--group <name>"),
    ErrorCode.cluster_authorization_failed: ("cluster", "--cluster"),
    ErrorCode.transactional_id_authorization_failed: (
        "transactional id",
        "--transactional-id <id>",
    ),
}


def _acl_hint(error: ErrorCode, resource: str, operation: str | None) -> str | None:
    """What a denied request needs: the ACL, in the form the acls tool takes it."""
    denied = _DENIED.get(error)
    if denied is None:
        return None
    kind, option = denied
    if operation is None:
        return (
            f"the principal this client authenticates as has no ACL allowing this request on"
            f" the {kind}: list them with storage-core acls --list"
        )
    return (
        f"the principal this client authenticates as needs an ACL allowing {operation} on the"
        f" {kind} ({resource}): storage-core acls --add --allow-principal User:<principal>"
        f" --operation {operation} {option}"
    )


def raise_for_error(
    error: ErrorCode,
    *,
    resource: str,
    broker_message: str | None = None,
    operation: str | None = None,
) -> None:
    """Raise ``BrokerResponseError`` unless ``error`` is ``ErrorCode.none``; ``operation``
    is the ACL operation the request needed (named if the broker denied it)."""
    if error != ErrorCode.none:
        raise BrokerResponseError(
            error, resource=resource, broker_message=broker_message, operation=operation
        )
