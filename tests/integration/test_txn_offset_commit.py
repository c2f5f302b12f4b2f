"""TxnOffsetCommit on a real broker process, over raw sockets as a transactional producer and
its transaction coordinator send it: offsets pending until the marker on the group's
``__consumer_offsets`` partition (OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT, without it the old offset), a commit marker making them visible, an
abort marker leaving the old ones, a restart with offsets still pending, KIP-447 fencing of
a stale generation and a replaced static member, and Kafka's ACL checks.
"""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME, partition_for
from storage_core.protocol.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from storage_core.protocol.messages import build
from storage_core.security.authorizer.acl_authorizer import AclAuthorizer, AuthorizerConfig
from storage_core.zk.acl_znodes import AclZkStore
from storage_core.zk.local_znode_tree import LocalZNodeTree
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(120)

TOPIC = "orders"
OFFSETS_PARTITIONS = 4  # BrokerProcess's offsets.topic.num.partitions
TIMEOUT = datetime.timedelta(seconds=10)


class Client:
    """One connection speaking as a consumer, a transactional producer and its coordinator."""

    def __init__(self, port: int, *, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection(
            ("127.0.0.1", port), timeout=10, source_address=(host, 0)
        )

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        return raw_wire.call(self.sock, api_key, version, **fields)

    def producer_id(self) -> tuple[int, int]:
        body = self.call(
            22,
            4,
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        assert body.error_code == ErrorCode.none, body
        return int(body.producer_id), int(body.producer_epoch)

    def commit(self, group: str, offset: int, partition: int = 0) -> ErrorCode:
        m = raw_wire.request_classes(8, 8)
        body = self.call(
            8,
            8,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                m.OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=(
                        m.OffsetCommitRequestPartition(
                            partition_index=partition,
                            committed_offset=offset,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        ),
                    ),
                ),
            ),
        )
        return body.topics[0].partitions[0].error_code  # type: ignore[no-any-return]

    def txn_commit(
        self,
        group: str,
        producer: tuple[int, int],
        offsets: dict[tuple[str, int], int],
        *,
        version: int = 3,
        transactional_id: str = "tx",
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> dict[tuple[str, int], ErrorCode]:
        m = raw_wire.request_classes(28, version)
        topics: dict[str, list[Any]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                build(  # the fields of ``version`` among these
                    m.TxnOffsetCommitRequestPartition,
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata=f"m{offset}",
                )
            )
        body = self.call(
            28,
            version,
            transactional_id=transactional_id,
            group_id=group,
            producer_id=producer[0],
            producer_epoch=producer[1],
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            topics=tuple(
                m.TxnOffsetCommitRequestTopic(name=name, partitions=tuple(parts))
                for name, parts in topics.items()
            ),
        )
        return {
            (t.name, int(p.partition_index)): p.error_code
            for t in body.topics
            for p in t.partitions
        }

    def end(self, group: str, producer: tuple[int, int], *, commit: bool) -> ErrorCode:
        """The transaction coordinator's marker on the group's offsets partition."""
        m = raw_wire.request_classes(27, 1)
        partition = partition_for(group, OFFSETS_PARTITIONS)
        body = self.call(
            27,
            1,
            markers=(
                m.WritableTxnMarker(
                    producer_id=producer[0],
                    producer_epoch=producer[1],
                    transaction_result=commit,
                    topics=(
                        m.WritableTxnMarkerTopic(
                            name=OFFSETS_TOPIC_NAME, partition_indexes=(partition,)
                        ),
                    ),
                    coordinator_epoch=0,
                ),
            ),
        )
        return body.markers[0].topics[0].partitions[0].error_code  # type: ignore[no-any-return]

    def fetch(
        self, group: str, *, version: int = 8, require_stable: bool = False, partition: int = 0
    ) -> tuple[ErrorCode, int]:
        """(partition error, committed offset) of orders-<partition>; the group-level error
        must be NONE."""
        if version >= 8:
            m = raw_wire.request_classes(9, version)
            body = self.call(
                9,
                version,
                groups=(
                    m.OffsetFetchRequestGroup(
                        group_id=group,
                        topics=(
                            m.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(partition,)),
                        ),
                    ),
                ),
                require_stable=require_stable,
            )
            (answer,) = body.groups
        else:
            m = raw_wire.request_classes(9, version)
            fields: dict[str, Any] = {
                "group_id": group,
                "topics": (m.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(partition,)),),
            }
            if version >= 7:
                fields["require_stable"] = require_stable
            answer = self.call(9, version, **fields)
        assert answer.error_code == ErrorCode.none, answer
        (p,) = answer.topics[0].partitions
        return p.error_code, int(p.committed_offset)

    def fetch_when_loaded(self, group: str, **kwargs: Any) -> tuple[ErrorCode, int]:
        """As ``fetch``, once the coordinator has loaded the group's partition."""
        deadline = time.monotonic() + 20
        while True:
            try:
                return self.fetch(group, **kwargs)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path) as process:
        raw_wire.create_topic(process.port, TOPIC, partitions=2)
        yield process


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Client]:
    opened = Client(broker.port)
    yield opened
    opened.close()


UNSTABLE = ErrorCode.unstable_offset_commit
NONE = ErrorCode.none


def test_pending_offsets_are_unstable_until_the_commit_marker(client: Client) -> None:
    producer = client.producer_id()
    assert client.commit("g", 5) == NONE
    assert client.txn_commit("g", producer, {(TOPIC, 0): 10}) == {(TOPIC, 0): NONE}
    assert client.fetch("g", require_stable=True) == (UNSTABLE, -1)
    assert client.fetch("g", version=7, require_stable=True) == (UNSTABLE, -1)
    assert client.fetch("g") == (NONE, 5)
    assert client.fetch("g", version=6) == (NONE, 5)
    assert client.end("g", producer, commit=True) == NONE
    assert client.fetch("g", require_stable=True) == (NONE, 10)
    assert client.fetch("g", version=7, require_stable=True) == (NONE, 10)


def test_an_abort_marker_leaves_the_old_offset(client: Client) -> None:
    producer = client.producer_id()
    assert client.commit("g", 5) == NONE
    assert client.txn_commit("g", producer, {(TOPIC, 0): 10}, version=0) == {(TOPIC, 0): NONE}
    assert client.end("g", producer, commit=False) == NONE
    assert client.fetch("g", require_stable=True) == (NONE, 5)


def test_offsets_pending_at_a_restart_are_decided_by_the_marker_after_it(
    broker: BrokerProcess,
) -> None:
    first = Client(broker.port)
    committed, aborted = first.producer_id(), first.producer_id()
    assert first.commit("kept", 5) == NONE
    assert first.txn_commit("kept", committed, {(TOPIC, 0): 10}) == {(TOPIC, 0): NONE}
    assert first.commit("dropped", 5) == NONE
    assert first.txn_commit("dropped", aborted, {(TOPIC, 0): 10}) == {(TOPIC, 0): NONE}
    first.close()
    broker.restart()
    second = Client(broker.port)
    try:
        assert second.fetch_when_loaded("kept", require_stable=True) == (UNSTABLE, -1)
        assert second.fetch_when_loaded("dropped", require_stable=True) == (UNSTABLE, -1)
        assert second.fetch("kept") == (NONE, 5)
        assert second.end("kept", committed, commit=True) == NONE
        assert second.end("dropped", aborted, commit=False) == NONE
        assert second.fetch("kept", require_stable=True) == (NONE, 10)
        assert second.fetch("dropped", require_stable=True) == (NONE, 5)
    finally:
        second.close()
    broker.restart()
    third = Client(broker.port)
    try:
        assert third.fetch_when_loaded("kept", require_stable=True) == (NONE, 10)
        assert third.fetch_when_loaded("dropped", require_stable=True) == (NONE, 5)
    finally:
        third.close()


def _static_member(client: Client, group: str, instance_id: str) -> tuple[str, int]:
    """Join ``group`` as a static member and sync; (member id, generation)."""
    joined = client.call(
        11,
        5,
        group_id=group,
        session_timeout=datetime.timedelta(seconds=30),
        rebalance_timeout=datetime.timedelta(seconds=30),
        member_id="",
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=(
            raw_wire.request_classes(11, 5).JoinGroupRequestProtocol(name="range", metadata=b""),
        ),
    )
    assert joined.error_code == NONE, joined
    member_id, generation = joined.member_id, int(joined.generation_id)
    m = raw_wire.request_classes(14, 3)
    synced = client.call(
        14,
        3,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        assignments=(m.SyncGroupRequestAssignment(member_id=member_id, assignment=b""),),
    )
    assert synced.error_code == NONE, synced
    return member_id, generation


def test_kip_447_fences_a_stale_generation_and_a_replaced_member(client: Client) -> None:
    producer = client.producer_id()
    member_id, generation = _static_member(client, "members", "instance-1")
    offsets = {(TOPIC, 0): 10}

    def commit(**kwargs: Any) -> ErrorCode:
        return client.txn_commit("members", producer, offsets, **kwargs)[(TOPIC, 0)]

    assert commit(generation_id=generation + 1, member_id=member_id) == ErrorCode.illegal_generation
    assert commit(generation_id=generation, member_id="nobody") == ErrorCode.unknown_member_id
    assert (
        commit(generation_id=generation, member_id="old", group_instance_id="instance-1")
        == ErrorCode.fenced_instance_id
    )
    assert client.fetch("members", require_stable=True) == (NONE, -1)  # nothing was written
    assert (
        commit(generation_id=generation, member_id=member_id, group_instance_id="instance-1")
        == NONE
    )
    assert client.end("members", producer, commit=True) == NONE
    assert client.fetch("members") == (NONE, 10)


def test_unknown_partitions_and_an_empty_group_id(client: Client) -> None:
    producer = client.producer_id()
    answers = client.txn_commit("g", producer, {(TOPIC, 1): 3, (TOPIC, 7): 3, ("nope", 0): 3})
    assert answers == {
        (TOPIC, 1): NONE,
        (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert client.txn_commit("", producer, {(TOPIC, 0): 3}) == {
        (TOPIC, 0): ErrorCode.invalid_group_id
    }


# ====================================================================== ACLs
ADMIN_HOST, LIMITED_HOST = "127.0.0.1", "127.0.0.2"


def _seed_acls(log_dir: Path) -> None:
    """Everything for the admin host; for the limited one WRITE on transactional id "tx",
    READ on group "g" and on topic "orders" only."""
    log_dir.mkdir(parents=True, exist_ok=True)
    session = LocalZNodeTree(log_dir).session()
    session.start()
    authorizer = AclAuthorizer(
        AclZkStore(session),
        AuthorizerConfig(super_users=frozenset(), allow_everyone_if_no_acl_found=False),
    )
    authorizer.start()

    def binding(kind: ResourceType, name: str, host: str, operation: AclOperation) -> AclBinding:
        return AclBinding(
            pattern=ResourcePattern(
                resource_type=kind, name=name, pattern_type=PatternType.LITERAL
            ),
            entry=AccessControlEntry(
                principal="User:ANONYMOUS",
                host=host,
                operation=operation,
                permission_type=AclPermissionType.ALLOW,
            ),
        )

    everything = [
        binding(kind, name, ADMIN_HOST, AclOperation.ALL)
        for kind, name in (
            (ResourceType.CLUSTER, "kafka-cluster"),
            (ResourceType.TOPIC, "*"),
            (ResourceType.GROUP, "*"),
            (ResourceType.TRANSACTIONAL_ID, "*"),
        )
    ]
    limited = [
        binding(ResourceType.TRANSACTIONAL_ID, "tx", LIMITED_HOST, AclOperation.WRITE),
        binding(ResourceType.GROUP, "g", LIMITED_HOST, AclOperation.READ),
        binding(ResourceType.TOPIC, TOPIC, LIMITED_HOST, AclOperation.READ),
        binding(ResourceType.CLUSTER, "kafka-cluster", LIMITED_HOST, AclOperation.IDEMPOTENT_WRITE),
    ]
    results = authorizer.create_acls(everything + limited)
    assert all(r.error is None for r in results)
    authorizer.close()
    session.stop()


def test_acl_denials_in_kafkas_order(tmp_path: Path) -> None:
    process = BrokerProcess(
        tmp_path, overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
    )
    _seed_acls(process.log_dir)
    with process:
        raw_wire.create_topic(process.port, TOPIC)
        raw_wire.create_topic(process.port, "secret")
        admin = Client(process.port, host=ADMIN_HOST)
        limited = Client(process.port, host=LIMITED_HOST)
        try:
            producer = admin.producer_id()
            wanted = {(TOPIC, 0): 10, ("secret", 0): 10}
            denied_txn = limited.txn_commit("g", producer, wanted, transactional_id="other")
            assert set(denied_txn.values()) == {ErrorCode.transactional_id_authorization_failed}
            denied_group = limited.txn_commit("other-group", producer, wanted)
            assert set(denied_group.values()) == {ErrorCode.group_authorization_failed}
            assert limited.txn_commit("g", producer, wanted) == {
                (TOPIC, 0): NONE,
                ("secret", 0): ErrorCode.topic_authorization_failed,
            }
            assert admin.end("g", producer, commit=True) == NONE
            assert admin.fetch("g") == (NONE, 10)
            secret = admin.call(
                9,
                6,
                group_id="g",
                topics=(
                    raw_wire.request_classes(9, 6).OffsetFetchRequestTopic(
                        name="secret", partition_indexes=(0,)
                    ),
                ),
            )
            assert int(secret.topics[0].partitions[0].committed_offset) == -1
            assert admin.fetch("other-group") == (NONE, -1)
        finally:
            admin.close()
            limited.close()
