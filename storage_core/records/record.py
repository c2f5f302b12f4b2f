"""Records of a v2 batch: the values a producer hands in and the values a reader gets back.

Wire format of one record inside a batch (Kafka's ``DefaultRecord``; varint/varlong are
zigzag encoded, see ``records.varint``)::

    length          varint   bytes of the record after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - batch base timestamp
    offsetDelta     varint   offset - batch base offset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers         [headerKeyLength varint, headerKey UTF-8,
                     headerValueLength varint (-1 for null), headerValue bytes] * headerCount
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.records.varint import INT64_MAX

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    """A record header: a non-null UTF-8 key and a nullable value."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleRecord:
    """A record as a producer hands it in, before the log gives it an offset.

    ``timestamp`` is epoch milliseconds, or ``NO_TIMESTAMP`` (-1) when the producer set none.
    """

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp: int = NO_TIMESTAMP

    def __post_init__(self) -> None:
        if not NO_TIMESTAMP <= self.timestamp <= INT64_MAX:
            raise ValueError(
                f"invalid record timestamp {self.timestamp}: use epoch milliseconds >= 0"
                f" or {NO_TIMESTAMP} for none"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """A record read back from a batch, with its absolute offset and timestamp.

    In a LogAppendTime batch ``timestamp`` is the batch's max timestamp (the append time), as
    Kafka reports it.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    attributes: int = 0
