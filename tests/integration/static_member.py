"""A static consumer (confluent-kafka, ``group.instance.id``) in its own process, for tests
that SIGKILL it and start it again.

    python -m tests.integration.static_member BOOTSTRAP TOPIC GROUP INSTANCE_ID SESSION_MS

Prints one JSON object per line on stdout: ``{"assigned": [partitions]}`` and
``{"revoked": [partitions]}`` from the rebalance callbacks, ``{"record": [partition, offset,
value]}`` per consumed record. Polls until it is killed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from confluent_kafka import Consumer, TopicPartition


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def main() -> None:
    bootstrap, topic, group, instance_id, session_ms = sys.argv[1:6]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": instance_id,
            "session.timeout.ms": int(session_ms),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )

    def on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        emit(assigned=sorted(p.partition for p in partitions))

    def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        emit(revoked=sorted(p.partition for p in partitions))

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while True:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error() is not None:
            emit(error=str(message.error()))
            continue
        value = message.value()
        emit(record=[message.partition(), message.offset(), value.decode() if value else None])


if __name__ == "__main__":
    main()
