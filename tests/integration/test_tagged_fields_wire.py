"""KIP-482 over a real socket: requests carrying tagged fields the schema does not define (in
the header, the body, a topic, a partition), or a null ClusterId, are answered as the same
requests without them; the broker used to close the connection ('cannot decode FetchRequest
v12: Unknown tagged field tag: N')."""

from __future__ import annotations

import datetime
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from storage_core.records import SimpleRecord, build_batch
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.unit.test_tagged_fields import UNKNOWN_TAGS, tags

pytestmark = pytest.mark.timeout(120)

TOPIC = "tagged"
CLIENT_ID = b"raw-wire"  # raw_wire's client id: the header's tags follow it
HEADER_TAGS_AT = 10 + len(CLIENT_ID)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("tagged")) as process:
        raw_wire.create_topic(process.port, TOPIC)
        yield process


def splice(frame: bytes, *, header: bytes | None = None, tail: dict[int, bytes]) -> bytes:
    """``frame`` (size prefix included) with its header's tag section replaced by ``header``
    and the one-byte empty tag sections at ``-n`` from its end replaced by ``tail[n]``."""
    body = frame[4:]
    assert body[HEADER_TAGS_AT] == 0
    if header is not None:
        body = body[:HEADER_TAGS_AT] + header + body[HEADER_TAGS_AT + 1 :]
    for back in sorted(tail, reverse=True):  # the farthest first: later ones keep their place
        assert body[-back] == 0, back
        body = body[:-back] + tail[back] + body[len(body) - back + 1 :]
    return struct.pack(">i", len(body)) + body


def send(sock: socket.socket, frame: bytes, api_key: int, version: int) -> Any:
    sock.sendall(frame)
    _correlation_id, body = raw_wire.read_response(sock, api_key, version)
    return body


def produce_v9(value: bytes) -> bytes:
    module = raw_wire.request_classes(0, 9)
    batch = build_batch([SimpleRecord(key=None, value=value, timestamp=1_700_000_000_000)])
    return raw_wire.request_bytes(
        0,
        9,
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            module.TopicProduceData(
                name=TOPIC,
                partition_data=(module.PartitionProduceData(index=0, records=batch),),
            ),
        ),
    )


def fetch_v12() -> bytes:
    module = raw_wire.request_classes(1, 12)
    return raw_wire.request_bytes(
        1,
        12,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            module.FetchTopic(
                topic=TOPIC,
                partitions=(
                    module.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def test_produce_and_fetch_with_unknown_tags_at_every_level_are_answered(
    broker: BrokerProcess,
) -> None:
    with raw_wire.connect(broker.port) as sock:
        # Produce v9 ends: partition tags (-3), topic tags (-2), body tags (-1).
        for index, tag in enumerate(UNKNOWN_TAGS):
            frame = splice(
                produce_v9(b"value-%d" % index),
                header=tags((tag, b"h")),
                tail={3: tags((tag, b"p")), 2: tags((tag + 1, b"")), 1: tags((tag, b"\x00"))},
            )
            response = send(sock, frame, 0, 9)
            (partition,) = response.responses[0].partition_responses
            assert partition.error_code.value == 0
            assert partition.base_offset == index

        # Fetch v12 ends: partition tags (-5), topic tags (-4), forgotten [], rack "",
        # body tags (-1). Each level alone, then all of them with a null ClusterId (tag 0).
        levels = {"header": None, "partition": 5, "topic": 4, "body": 1}
        cases = [{level: tags((tag, b"abc"))} for level in levels for tag in UNKNOWN_TAGS] + [
            {
                "header": tags((1000, b"")),
                "partition": tags((7, b"x")),
                "topic": tags((42, b"")),
                "body": tags((0, b"\x00"), (1000, b"yz")),
            }
        ]
        for case in cases:
            frame = splice(
                fetch_v12(),
                header=case.get("header"),
                tail={levels[k]: v for k, v in case.items() if k != "header"},
            )
            response = send(sock, frame, 1, 12)
            assert response.error_code.value == 0, case
            (partition,) = response.responses[0].partitions
            assert partition.error_code.value == 0, case
            assert partition.high_watermark == len(UNKNOWN_TAGS), case
            assert b"value-2" in (partition.records or b""), case


def test_metadata_and_api_versions_with_unknown_tags_are_answered(broker: BrokerProcess) -> None:
    module = raw_wire.request_classes(3, 12)
    metadata = raw_wire.request_bytes(
        3,
        12,
        topics=(module.MetadataRequestTopic(name=TOPIC, topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    api_versions = raw_wire.request_bytes(
        18, 3, client_software_name="raw-wire", client_software_version="1.0"
    )
    with raw_wire.connect(broker.port) as sock:
        # Metadata v12 ends: topic tags (-4), two booleans, body tags (-1).
        for tag in UNKNOWN_TAGS:
            frame = splice(metadata, header=tags((tag, b"")), tail={4: tags((tag, b"t"))})
            response = send(sock, frame, 3, 12)
            (topic,) = response.topics
            assert (topic.name, topic.error_code.value) == (TOPIC, 0)
            assert [p.leader_id for p in topic.partitions] == [0]
            response = send(sock, splice(api_versions, tail={1: tags((tag, b"v"))}), 18, 3)
            assert response.error_code.value == 0
            assert any(key.api_key == 1 for key in response.api_keys)
