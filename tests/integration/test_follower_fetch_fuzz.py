"""Mutated follower fetches against the leader of a real 2-broker cluster.

A follower's one-partition Fetch v12 is decoded by a fast path (``follower_fetch``) and every
other Fetch by the general decoder; the fast path must decide as the general one does. It did
not: a client id length below -1, a client or rack id that is not UTF-8 and a null rack id
were answered by the leader where the general decoder refuses them (and closes the
connection). The follower state and the parked-fetch path run only where a real follower
replicates, so this runs on brokers 1 (leader) and 2 (follower) on ZooKeeper.

A seeded generator mutates follower fetches of broker 2 (at offset 0, and at the log end with
a short wait, which parks): bytes set, inserted and deleted, truncation, with lengths of -1
and below, bytes that are not UTF-8, null and empty varints. Each frame goes to the leader on
a connection of its own and its outcome (answered, closed, still waiting) must be what the
general decoder decides for it: refused frames are closed, accepted ones answered (or left
waiting on a long wait), the answer carrying the correlation id and, for a sessionless fetch,
exactly the partitions the general decoder read. Afterwards the cluster still replicates
(acks=all produces with min.insync.replicas=2 succeed, both brokers in the ISR) and the
leader's log holds no traceback.

``FOLLOWER_FETCH_FUZZ_FRAMES`` sets the number of frames (the suite sends a short run).
"""

from __future__ import annotations

import os
import random
import struct
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.server.protocol import MalformedRequestError, parse_request
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually, partition_states
from tests.integration import raw_wire
from tests.unit.test_follower_fetch import frame_of, partition_fetch

cluster_support.require_java()

pytestmark = pytest.mark.timeout(300)

SEED = 20_261_129
FRAMES = int(os.environ.get("FOLLOWER_FETCH_FUZZ_FRAMES", "400"))
TIME_LIMIT_S = 120.0
ANSWER_TIMEOUT_S = 1.5
TOPIC = "fuzzed-follower"
LEADER, FOLLOWER = 1, 2
RECORDS = 20
INTERESTING = (
    b"\xff",
    b"\xff\xfe",
    b"\xff\xff",
    b"\x80",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\x00",
    b"\x01",
    b"\x02",
    b"\x7f",
    b"\x80\x80\x80\x80\x08",
)


@pytest.fixture
def cluster(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    overrides = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "10000"}
    with cluster_support.brokers_in_cluster(zookeeper, tmp_path, (LEADER, FOLLOWER), overrides) as (
        started,
        _connect,
    ):
        admin = cluster_support.admin(started)
        futures = admin.create_topics(
            [NewTopic(TOPIC, num_partitions=1, replica_assignment=[[LEADER, FOLLOWER]])]
        )
        futures[TOPIC].result(timeout=30)
        eventually(
            lambda: partition_states(started[LEADER].bootstrap, TOPIC)[0][2] == (LEADER, FOLLOWER),
            what="both replicas in the ISR",
        )
        yield started


def produce_all_acks(broker: BrokerProcess, count: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    errors: list[object] = []
    for index in range(count):
        producer.produce(
            TOPIC,
            value=f"{tag}-{index}".encode(),
            on_delivery=lambda error, _msg: errors.append(error) if error else None,
        )
    assert producer.flush(30) == 0
    assert errors == []


def base_frames() -> list[bytes]:
    """Follower fetches of broker 2 as its ReplicaFetcherThread sends them: at offset 0 (an
    answer at once) and at the log end with a short wait (parked until it expires)."""
    frames = []
    for fetch_offset, max_wait_ms in ((0, 0), (RECORDS, 20)):
        for client_id in (b"broker-2-fetcher-0", None):
            frame = frame_of(
                partition_fetch(topic=TOPIC, fetch_offset=fetch_offset, current_leader_epoch=-1),
                replica_id=FOLLOWER,
                client_id=client_id,
                max_wait_ms=max_wait_ms,
            )
            frames.append(frame)
            frames.append(frame[:-2] + b"\x03r1\x00")  # with a rack id
    return frames


def mutate(rng: random.Random, frame: bytes) -> bytes:
    out = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("set", "set", "set", "insert", "delete", "truncate"))
        position = rng.randrange(4, len(out) + 1)  # the API key and version stay Fetch v12
        data = rng.choice(INTERESTING) if rng.random() < 0.7 else rng.randbytes(rng.randint(1, 4))
        if kind == "set":
            out[position : position + len(data)] = data
        elif kind == "insert":
            out[position:position] = data
        elif kind == "delete":
            del out[position : position + len(data)]
        else:
            del out[position:]
    return bytes(out)


def general_decision(frame: bytes) -> object | None:
    """The request the general decoder reads from ``frame``, or None when it refuses it."""
    try:
        return parse_request(frame)
    except MalformedRequestError:
        return None


def outcome(port: int, frame: bytes) -> tuple[str, object | None]:
    """("answered", (correlation id, body)), ("closed", None) or ("waiting", None)."""
    with raw_wire.connect(port) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        sock.settimeout(ANSWER_TIMEOUT_S)
        try:
            return "answered", raw_wire.read_response(sock, 1, 12)
        except TimeoutError:
            return "waiting", None
        except ConnectionError:
            return "closed", None


def test_the_leader_decides_every_mutated_follower_fetch_as_the_general_decoder(
    cluster: dict[int, BrokerProcess],
) -> None:
    leader = cluster[LEADER]
    produce_all_acks(leader, RECORDS, "before")
    rng = random.Random(SEED)
    bases = base_frames()
    # The four kinds of frames the fast path used to answer and the general decoder refuses.
    known = [
        bases[0][:8] + struct.pack(">h", -2) + bases[0][10:],
        bases[0][:10] + b"\xff\xfe" + bases[0][12:],
        bases[0][:-2] + b"\x00\x00",
        bases[0][:-2] + b"\x02\xff\x00",
    ]
    frames = known + [mutate(rng, rng.choice(bases)) for _ in range(FRAMES)]
    seen: Counter[str] = Counter()
    mismatches: list[str] = []
    started = time.monotonic()
    for frame in frames:
        if time.monotonic() - started > TIME_LIMIT_S:
            break
        decided = general_decision(frame)
        got, answer = outcome(leader.port, frame)
        seen[f"{'accepted' if decided else 'refused'}/{got}"] += 1
        if decided is None:
            if got != "closed":
                mismatches.append(f"{got} where the general decoder refuses: {frame.hex()}")
            continue
        if got == "closed":
            mismatches.append(f"closed where the general decoder accepts: {frame.hex()}")
            continue
        if got == "waiting":
            continue
        header, request = decided  # type: ignore[misc]
        correlation_id, body = answer  # type: ignore[misc]
        if correlation_id != header.correlation_id:
            mismatches.append(f"answer to {correlation_id} for {header.correlation_id}")
        if request.session_id == 0 and request.session_epoch == -1 and body.error_code.value == 0:
            asked = [(t.topic, [int(p.partition) for p in t.partitions]) for t in request.topics]
            answered = [
                (t.topic, [int(p.partition_index) for p in t.partitions]) for t in body.responses
            ]
            if asked != answered:
                mismatches.append(f"asked {asked}, answered {answered}: {frame.hex()}")
    assert sum(seen.values()) >= min(len(frames), 200), seen
    assert seen["refused/closed"] >= 4 and seen["accepted/answered"] >= 20, seen
    assert mismatches == [], (seen, mismatches[:5])

    # The cluster still replicates: acks=all needs both replicas (min.insync.replicas=2).
    produce_all_acks(leader, RECORDS, "after")
    eventually(
        lambda: partition_states(leader.bootstrap, TOPIC)[0][2] == (LEADER, FOLLOWER),
        what="both replicas in the ISR after the fuzzing",
    )
    assert "Traceback" not in leader.output()
