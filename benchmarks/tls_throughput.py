"""Produce and consume throughput over TLS as a ratio of PLAINTEXT, in the same run.

One broker process on loopback with two listeners, PLAINTEXT and SSL (a PEM key store made by
``tests.security_support``; TLS 1.3, the default suites; ``--client-auth required`` gives
the client a certificate too). For each listener, confluent-kafka (librdkafka, with OpenSSL on
its side) produces ``--total-mib`` of 1 KiB records to a topic of its own (acks=1, batches up
to 1 MiB, as ``broker_throughput.py``) and then consumes them from offset 0 with fetches of
64 MiB. Cases alternate listeners round by round; each figure is the best of ``--rounds``.

Over TLS the broker cannot sendfile: fetch responses are copied through the TLS transport in
256 KiB chunks (``response_parts.TLS_CHUNK_BYTES``), as Kafka copies 32 KiB chunks through its
SSLEngine. The issue's aims are for SASL_SSL (>= 0.7 produce, >= 0.6 consume); SSL is the same
encryption without the one-off SASL exchange. Client and broker share the machine's CPUs.

    python benchmarks/tls_throughput.py [--total-mib 128] [--rounds 2] [--dir bench-tls]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.ports import free_port
from tests.broker_process import BrokerProcess
from tests.security_support import TestPki, ssl_listener_props

RECORD_BYTES = 1024
BATCH_BYTES = 1024 * 1024
FETCH_BYTES = 64 * 1024 * 1024
MESSAGE_MAX_BYTES = 2 * 1024 * 1024
CONSUME_BATCH = 100_000
TIMEOUT_S = 300.0


def produce(config: dict[str, Any], topic: str, total_records: int) -> float:
    producer = Producer(
        {
            **config,
            "acks": "1",
            "compression.type": "none",
            "batch.size": BATCH_BYTES,
            "batch.num.messages": 1_000_000,
            "linger.ms": 50,
            "message.max.bytes": MESSAGE_MAX_BYTES,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": False,
        }
    )
    failures: list[str] = []
    producer.list_topics(topic, timeout=30)  # connected, metadata read, before the clock
    payload = os.urandom(RECORD_BYTES)
    os.sync()
    start = time.perf_counter()
    for _ in range(total_records):
        while True:
            try:
                producer.produce(
                    topic,
                    payload,
                    partition=0,
                    on_delivery=lambda e, _m: failures.append(str(e)) if e else None,
                )
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(TIMEOUT_S) != 0:
        raise SystemExit(f"{topic}: records still unsent after {TIMEOUT_S}s")
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{topic}: {len(failures)} records failed, first: {failures[0]}")
    return elapsed


def consume(config: dict[str, Any], topic: str, total_records: int) -> float:
    consumer = Consumer(
        {
            **config,
            "group.id": f"bench-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_BYTES,
            "max.partition.fetch.bytes": FETCH_BYTES,
            "receive.message.max.bytes": FETCH_BYTES + 1024 * 1024,
            "queued.max.messages.kbytes": 2 * FETCH_BYTES // 1024,
        }
    )
    try:
        consumer.list_topics(topic, timeout=30)
        os.sync()
        start = time.perf_counter()
        consumer.assign([CTopicPartition(topic, 0, 0)])
        received = 0
        deadline = time.monotonic() + TIMEOUT_S
        while received < total_records:
            if time.monotonic() > deadline:
                raise SystemExit(f"{topic}: {received}/{total_records} records in {TIMEOUT_S}s")
            wanted = min(CONSUME_BATCH, total_records - received)
            for message in consumer.consume(num_messages=wanted, timeout=1.0):
                if message.error() is not None:
                    raise KafkaException(message.error())
                received += 1
        return time.perf_counter() - start
    finally:
        consumer.close()


def run(work_dir: Path, total_mib: int, rounds: int, client_auth: str) -> list[dict[str, Any]]:
    pki = TestPki(work_dir)
    certificate = pki.issue("broker", "CN=localhost,OU=brokers,O=bench")
    client = pki.issue("bench", "CN=bench,O=bench")
    plain_port, ssl_port = free_port(), free_port()
    broker = BrokerProcess(
        work_dir / "broker",
        port=plain_port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{ssl_port}",
            "message.max.bytes": str(MESSAGE_MAX_BYTES),
            "log.segment.bytes": str(256 * 1024 * 1024),
            **ssl_listener_props(pki, certificate, client_auth=client_auth),
        },
    )
    configs: dict[str, dict[str, Any]] = {
        "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{plain_port}"},
        "SSL": {
            "bootstrap.servers": f"127.0.0.1:{ssl_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_pem),
            **(
                {
                    "ssl.certificate.location": str(client.cert_file),
                    "ssl.key.location": str(client.key_file),
                }
                if client_auth != "none"
                else {}
            ),
        },
    }
    total_records = total_mib * 1024 * 1024 // RECORD_BYTES
    best: dict[tuple[str, str], float] = {}
    broker.start()
    try:
        admin = AdminClient(configs["PLAINTEXT"])
        for round_index in range(rounds):
            for listener, config in configs.items():
                topic = f"bench-{listener.lower()}-{round_index}"
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                for case, seconds in (
                    ("produce", produce(config, topic, total_records)),
                    ("consume", consume(config, topic, total_records)),
                ):
                    key = (case, listener)
                    best[key] = min(best.get(key, seconds), seconds)
    finally:
        broker.stop()
    rows = []
    for case in ("produce", "consume"):
        plain = total_mib / best[(case, "PLAINTEXT")]
        tls = total_mib / best[(case, "SSL")]
        rows.append(
            {
                "case": case,
                "plaintext_mib_s": round(plain, 1),
                "ssl_mib_s": round(tls, 1),
                "ratio": round(tls / plain, 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=128, help="record bytes per case")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--client-auth", choices=("none", "required"), default="none", help="ssl.client.auth"
    )
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    work_dir = args.dir or Path(tempfile.mkdtemp(prefix="bench-tls-"))
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    try:
        rows = run(work_dir.resolve(), args.total_mib, args.rounds, args.client_auth)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(f"{'case':<8} {'PLAINTEXT MiB/s':>16} {'SSL MiB/s':>10} {'SSL/PLAINTEXT':>14}")
    for r in rows:
        print(f"{r['case']:<8} {r['plaintext_mib_s']:>16} {r['ssl_mib_s']:>10} {r['ratio']:>14}")
    print(json.dumps({"benchmark": "tls_throughput", "command": command, "results": rows}))


if __name__ == "__main__":
    main()
