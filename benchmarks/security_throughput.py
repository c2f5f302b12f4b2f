"""What security costs, each figure a ratio against a baseline measured in the same run.

One broker process on loopback with a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512, a PEM
key store made by ``tests.security_support``; TLS 1.3, the default suites), and for the
authorizer case a second broker with Kafka's ACL authorizer. Clients and brokers share the
machine's CPUs. Three cases (``--cases``, all by default):

throughput   confluent-kafka produces ``--total-mib`` of 1 KiB records to a topic of its own
             (acks=1, batches up to 1 MiB) and consumes them from offset 0 (fetches of 64
             MiB), on PLAINTEXT and on SASL_SSL authenticated with SCRAM-SHA-512, listeners
             alternating round by round; best of ``--rounds``. The issue's aims: SASL_SSL >= 0.7
             of PLAINTEXT to produce, >= 0.6 to consume.
authorizer   the latency of one produce request (1 record, acks=1, one request at a time, as
             ``--produces`` flushes) to a broker with the ACL authorizer and ``--acls`` ACLs
             (``--acls-on-topic`` of other principals on the produced topic, which each
             decision reads, default a quarter; of the rest two thirds literal on other
             topics, a third prefixed that do not match; and the one that allows the write)
             against the same broker settings without an authorizer, alternating brokers
             every 50 requests (``--rounds`` x ``--produces`` requests each); medians. Aim:
             the authorizer costs <= 5% of the request.
storm        ``--connections`` connections opened at once (a barrier releases their threads
             together), each completing its TLS handshake and SCRAM-SHA-512 exchange on the
             SASL_SSL listener, against as many connections each sending ApiVersions on
             PLAINTEXT: every one must be served; the wall time of each burst and its ratio.

    python benchmarks/security_throughput.py [--total-mib 128] [--rounds 2] [--acls 1000]
        [--acls-on-topic 250] [--produces 2000] [--connections 500]
        [--cases throughput,authorizer,storm]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from benchmarks.tls_throughput import MESSAGE_MAX_BYTES, consume, produce
from embedded.ports import free_port
from storage_core.security.sasl_client_authenticator import authenticate_sasl
from tests.broker_process import BrokerProcess
from tests.security_support import TestPki, ssl_listener_props

USER = ("bench", "bench-secret")
MECHANISM = "SCRAM-SHA-512"
TIMEOUT_S = 120.0
CASES = ("throughput", "authorizer", "storm")
CONNECTIONS_MAX = 2000
LATENCY_CHUNK = 50  # produce requests to one broker before switching to the other
# ApiVersions v0 request: size, api key 18, version 0, correlation id, client id (null)
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)


def secured_listeners(
    work_dir: Path, name: str, **extra: str
) -> tuple[BrokerProcess, dict[str, Any]]:
    """A broker with a PLAINTEXT (inter-broker) and a SASL_SSL listener; the clients' configs."""
    pki = TestPki(work_dir / name)
    certificate = pki.issue("broker", "CN=localhost,OU=brokers,O=bench")
    plain_port, sasl_port = free_port(), free_port()
    broker = BrokerProcess(
        work_dir / name / "broker",
        port=plain_port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": MECHANISM,
            "message.max.bytes": str(MESSAGE_MAX_BYTES),
            "log.segment.bytes": str(256 * 1024 * 1024),
            "max.connections.per.ip": str(CONNECTIONS_MAX * 2 + 100),
            **ssl_listener_props(pki, certificate),
            **extra,
        },
    )
    configs = {
        "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{plain_port}"},
        "SASL_SSL": {
            "bootstrap.servers": f"127.0.0.1:{sasl_port}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": USER[0],
            "sasl.password": USER[1],
            "ssl.ca.location": str(pki.ca_pem),
        },
        "ports": {"PLAINTEXT": plain_port, "SASL_SSL": sasl_port},
        "ca": str(pki.ca_pem),
    }
    return broker, configs


def add_user(admin: AdminClient) -> None:
    upsert = UserScramCredentialUpsertion(
        USER[0], ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), USER[1].encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)


# ---------------------------------------------------------------------------- throughput
def throughput(work_dir: Path, total_mib: int, rounds: int) -> list[dict[str, Any]]:
    broker, configs = secured_listeners(work_dir, "throughput")
    total_records = total_mib * 1024 * 1024 // 1024
    best: dict[tuple[str, str], float] = {}
    with broker:
        admin = AdminClient(configs["PLAINTEXT"])
        add_user(admin)
        for round_index in range(rounds):
            for listener in ("PLAINTEXT", "SASL_SSL"):
                config = configs[listener]
                topic = f"bench-{listener.lower()}-{round_index}"
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                for case, seconds in (
                    ("produce", produce(config, topic, total_records)),
                    ("consume", consume(config, topic, total_records)),
                ):
                    best[(case, listener)] = min(best.get((case, listener), seconds), seconds)
    rows = []
    for case in ("produce", "consume"):
        plain = total_mib / best[(case, "PLAINTEXT")]
        secured = total_mib / best[(case, "SASL_SSL")]
        rows.append(
            {
                "case": case,
                "plaintext_mib_s": round(plain, 1),
                "sasl_ssl_mib_s": round(secured, 1),
                "ratio": round(secured / plain, 2),
            }
        )
    return rows


# ---------------------------------------------------------------------------- authorizer
def acl_bindings(topic: str, count: int, on_topic: int | None = None) -> list[AclBinding]:
    """``count`` ACLs, ``on_topic`` of them (default a quarter) other principals' on ``topic``,
    the last one allowing ANONYMOUS to write ``topic``."""

    def binding(rtype: Any, name: str, pattern: Any, principal: str, op: Any) -> AclBinding:
        return AclBinding(rtype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)

    same_topic = (count - 1) // 4 if on_topic is None else min(on_topic, count - 1)
    others = count - 1 - same_topic
    prefixed = others // 3
    literal = others - prefixed
    bindings = [
        binding(
            ResourceType.TOPIC,
            f"other-{i}",
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            AclOperation.WRITE,
        )
        for i in range(literal)
    ]
    bindings += [
        binding(
            ResourceType.TOPIC,
            f"p{i}-",
            ResourcePatternType.PREFIXED,
            "User:ANONYMOUS",
            AclOperation.WRITE,
        )
        for i in range(prefixed)
    ]
    bindings += [
        binding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:u{i}", AclOperation.WRITE
        )
        for i in range(same_topic)
    ]
    bindings.append(
        binding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            AclOperation.WRITE,
        )
    )
    return bindings


def latency_producer(bootstrap: str, topic: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 0,
            "enable.idempotence": False,
        }
    )
    producer.list_topics(topic, timeout=30)
    return producer


def produce_latencies_us(producer: Producer, topic: str, count: int) -> list[float]:
    """``count`` produce requests one at a time; each one's latency."""
    failures: list[str] = []
    latencies = []
    for i in range(count):
        start = time.perf_counter()
        producer.produce(
            topic,
            b"x" * 100,
            partition=0,
            on_delivery=lambda e, _m: failures.append(str(e)) if e else None,
        )
        producer.flush(TIMEOUT_S)
        latencies.append((time.perf_counter() - start) * 1e6)
        if failures:
            raise SystemExit(f"{topic}: produce {i} failed: {failures[0]}")
    return latencies


def authorizer(
    work_dir: Path, acls: int, on_topic: int | None, produces: int, rounds: int
) -> list[dict[str, Any]]:
    topic = "bench-authorized"
    brokers = {
        "without": BrokerProcess(work_dir / "no-authorizer"),
        "with": BrokerProcess(
            work_dir / "authorizer",
            overrides={
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                # the topic and cluster stay open to create; the topic's ACLs then decide
                "allow.everyone.if.no.acl.found": "true",
            },
        ),
    }
    samples: dict[str, list[float]] = {"with": [], "without": []}
    for broker in brokers.values():
        broker.start()
    try:
        producers = {}
        for name, broker in brokers.items():
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            if name == "with":
                for future in admin.create_acls(acl_bindings(topic, acls, on_topic)).values():
                    future.result(timeout=60)
            producers[name] = latency_producer(broker.bootstrap, topic)
            produce_latencies_us(producers[name], topic, min(200, produces))  # warm up
        # short alternating chunks, so that the load of a shared machine falls on both alike
        for _ in range(max(1, rounds * produces // LATENCY_CHUNK)):
            for name, producer in producers.items():
                samples[name] += produce_latencies_us(producer, topic, LATENCY_CHUNK)
    finally:
        for broker in brokers.values():
            broker.stop()
    without = statistics.median(samples["without"])
    with_acls = statistics.median(samples["with"])
    return [
        {
            "case": f"produce request, {acls} ACLs ({len(samples['with'])} requests each)",
            "acls_on_topic": sum(1 for b in acl_bindings(topic, acls, on_topic) if b.name == topic),
            "without_authorizer_us": round(without, 1),
            "with_authorizer_us": round(with_acls, 1),
            "cost_percent": round((with_acls / without - 1) * 100, 1),
            "ratio": round(with_acls / without, 3),
        }
    ]


# ---------------------------------------------------------------------------- storm
def _burst(count: int, connect: Callable[[], None]) -> tuple[float, int, str]:
    """Open ``count`` connections at once; the wall time, how many were served, the first
    failure."""
    barrier = threading.Barrier(count + 1)
    failures: list[str] = []

    def one() -> None:
        barrier.wait(TIMEOUT_S)
        try:
            connect()
        except Exception as exc:  # counted and reported
            failures.append(f"{type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(one) for _ in range(count)]
        barrier.wait(TIMEOUT_S)
        start = time.perf_counter()
        for future in futures:
            future.result(TIMEOUT_S)
        elapsed = time.perf_counter() - start
    return elapsed, count - len(failures), failures[0] if failures else ""


def storm(work_dir: Path, connections: int, rounds: int) -> list[dict[str, Any]]:
    broker, configs = secured_listeners(work_dir, "storm")
    ports = configs["ports"]
    context = ssl.create_default_context(cafile=configs["ca"])
    held: list[socket.socket] = []
    lock = threading.Lock()

    def plaintext() -> None:
        sock = socket.create_connection(("127.0.0.1", ports["PLAINTEXT"]), timeout=TIMEOUT_S)
        sock.sendall(API_VERSIONS_V0)
        size = struct.unpack(">i", _read(sock, 4))[0]
        _read(sock, size)
        with lock:
            held.append(sock)

    def sasl_ssl() -> None:
        raw = socket.create_connection(("127.0.0.1", ports["SASL_SSL"]), timeout=TIMEOUT_S)
        sock = context.wrap_socket(raw, server_hostname="localhost")
        authenticate_sasl(sock, mechanism=MECHANISM, username=USER[0], password=USER[1])
        with lock:
            held.append(sock)

    best: dict[str, tuple[float, int, str]] = {}
    with broker:
        add_user(AdminClient(configs["PLAINTEXT"]))
        for _ in range(rounds):
            for name, connect in (("PLAINTEXT", plaintext), ("SASL_SSL", sasl_ssl)):
                result = _burst(connections, connect)
                for sock in held:  # every connection stays open until its burst is over
                    sock.close()
                held.clear()
                if name not in best or result[0] < best[name][0]:
                    best[name] = result
                time.sleep(1)  # closed connections leave the broker before the next burst
    plain, secured = best["PLAINTEXT"], best["SASL_SSL"]
    return [
        {
            "case": f"{connections} connections at once",
            "plaintext_s": round(plain[0], 2),
            "plaintext_served": plain[1],
            "sasl_ssl_scram_s": round(secured[0], 2),
            "sasl_ssl_served": secured[1],
            "ratio": round(secured[0] / plain[0], 2),
            "first_failure": secured[2] or plain[2],
        }
    ]


def _read(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return bytes(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=128, help="throughput: MiB per case")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--acls", type=int, default=1000, help="authorizer: ACLs in the cache")
    parser.add_argument(
        "--acls-on-topic", type=int, default=None, help="authorizer: default --acls / 4"
    )
    parser.add_argument("--produces", type=int, default=2000, help="authorizer: per round")
    parser.add_argument("--connections", type=int, default=500, help="storm: at once")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: choose from {', '.join(CASES)}")
    if not 2 <= args.acls <= 100_000:
        parser.error("--acls: 2 to 100000")
    if not 1 <= args.connections <= CONNECTIONS_MAX:
        parser.error(f"--connections: 1 to {CONNECTIONS_MAX}")
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    work_dir = args.dir or Path(tempfile.mkdtemp(prefix="bench-security-"))
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        root = work_dir.resolve()
        if "throughput" in cases:
            results["throughput"] = throughput(root, args.total_mib, args.rounds)
            print(f"{'case':<8} {'PLAINTEXT MiB/s':>16} {'SASL_SSL MiB/s':>15} {'ratio':>6}")
            for r in results["throughput"]:
                print(
                    f"{r['case']:<8} {r['plaintext_mib_s']:>16} {r['sasl_ssl_mib_s']:>15}"
                    f" {r['ratio']:>6}",
                    flush=True,
                )
        if "authorizer" in cases:
            results["authorizer"] = authorizer(
                root, args.acls, args.acls_on_topic, args.produces, args.rounds
            )
            for r in results["authorizer"]:
                print(
                    f"{r['case']}, {r['acls_on_topic']} on the topic: median"
                    f" {r['without_authorizer_us']} us without the"
                    f" authorizer, {r['with_authorizer_us']} us with it: ratio {r['ratio']}"
                    f" ({r['cost_percent']:+}%)",
                    flush=True,
                )
        if "storm" in cases:
            results["storm"] = storm(root, args.connections, args.rounds)
            for r in results["storm"]:
                print(
                    f"{r['case']}: PLAINTEXT ApiVersions {r['plaintext_served']} served in"
                    f" {r['plaintext_s']} s, SASL_SSL SCRAM {r['sasl_ssl_served']} authenticated"
                    f" in {r['sasl_ssl_scram_s']} s: ratio {r['ratio']}"
                    + (f"; first failure: {r['first_failure']}" if r["first_failure"] else ""),
                    flush=True,
                )
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps({"benchmark": "security_throughput", "command": command, "results": results}))


if __name__ == "__main__":
    main()
