"""The ACL authorizer's decision, its ACL management and its change notifications, ported
from Kafka 3.9's ``AuthorizerTest`` (the ZK quorum cases) over the single-node store: two
authorizers on one store are two brokers of one cluster."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.protocol.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    authorized_operations_bits,
)
from storage_core.security.authorizer.acl_authorizer import (
    AclAuthorizer,
    Action,
    AuthorizerConfig,
    authorizer_from_config,
)
from storage_core.security.kafka_principal import KafkaPrincipal
from storage_core.zk.acl_znodes import AclZkStore
from storage_core.zk.local_znode_tree import LocalZNodeTree

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
READ = AclOperation.READ
WRITE = AclOperation.WRITE
DESCRIBE = AclOperation.DESCRIBE
USERNAME = "alice"
PRINCIPAL = KafkaPrincipal("User", USERNAME)
HOST = "192.168.0.1"
RESOURCE = ResourcePattern(
    resource_type=ResourceType.TOPIC,
    name="foo-" + uuid.uuid4().hex,
    pattern_type=PatternType.LITERAL,
)
WILDCARD = ResourcePattern(
    resource_type=ResourceType.TOPIC, name=WILDCARD_RESOURCE, pattern_type=PatternType.LITERAL
)
PREFIXED = ResourcePattern(
    resource_type=ResourceType.TOPIC, name="foo", pattern_type=PatternType.PREFIXED
)
CLUSTER = ResourcePattern(
    resource_type=ResourceType.CLUSTER, name=CLUSTER_NAME, pattern_type=PatternType.LITERAL
)


def ace(
    principal: str, host: str, operation: AclOperation, permission: AclPermissionType
) -> AccessControlEntry:
    return AccessControlEntry(
        principal=principal, host=host, operation=operation, permission_type=permission
    )


ALLOW_READ = ace(str(PRINCIPAL), WILDCARD_HOST, READ, ALLOW)
ALLOW_WRITE = ace(str(PRINCIPAL), WILDCARD_HOST, WRITE, ALLOW)
DENY_READ = ace(str(PRINCIPAL), WILDCARD_HOST, READ, DENY)


def topic(name: str, pattern_type: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(resource_type=ResourceType.TOPIC, name=name, pattern_type=pattern_type)


@pytest.fixture
def tree() -> LocalZNodeTree:
    return LocalZNodeTree(None)


@pytest.fixture
def make_authorizer(tree: LocalZNodeTree) -> Iterator[Callable[..., AclAuthorizer]]:
    made: list[AclAuthorizer] = []

    def make(
        super_users: str = "User:superuser1;User:superuser2", allow_everyone: str = "false"
    ) -> AclAuthorizer:
        session = tree.session()
        session.start()
        authorizer = AclAuthorizer(
            AclZkStore(session),
            AuthorizerConfig.from_props(
                {"super.users": super_users, "allow.everyone.if.no.acl.found": allow_everyone}
            ),
            change_poll_interval_s=0.05,
        )
        authorizer.start()
        made.append(authorizer)
        return authorizer

    yield make
    for authorizer in made:
        authorizer.close()


@pytest.fixture
def authorizer1(make_authorizer: Callable[..., AclAuthorizer]) -> AclAuthorizer:
    return make_authorizer()


def authorize(
    authorizer: AclAuthorizer,
    operation: AclOperation,
    pattern: ResourcePattern,
    *,
    principal: KafkaPrincipal = PRINCIPAL,
    host: str = HOST,
) -> bool:
    return authorizer.authorize(
        principal, host, "Produce", [Action(operation=operation, pattern=pattern)]
    )[0]


def add_acls(
    authorizer: AclAuthorizer, acls: set[AccessControlEntry], pattern: ResourcePattern
) -> None:
    results = authorizer.create_acls([AclBinding(pattern=pattern, entry=a) for a in acls])
    assert [r.error for r in results] == [None] * len(acls)


def remove_acls(
    authorizer: AclAuthorizer, acls: set[AccessControlEntry], pattern: ResourcePattern
) -> None:
    """``acls`` empty: every ACL of the pattern."""
    pattern_filter = ResourcePatternFilter(
        resource_type=pattern.resource_type, name=pattern.name, pattern_type=pattern.pattern_type
    )
    filters = (
        [
            AclBindingFilter(
                pattern_filter=pattern_filter,
                entry_filter=AccessControlEntryFilter(
                    principal=a.principal,
                    host=a.host,
                    operation=a.operation,
                    permission_type=a.permission_type,
                ),
            )
            for a in acls
        ]
        if acls
        else [AclBindingFilter(pattern_filter=pattern_filter)]
    )
    authorizer.delete_acls(filters)


def get_acls(authorizer: AclAuthorizer, pattern: ResourcePattern) -> set[AccessControlEntry]:
    return {
        b.entry
        for b in authorizer.acls(
            AclBindingFilter(
                pattern_filter=ResourcePatternFilter(
                    resource_type=pattern.resource_type,
                    name=pattern.name,
                    pattern_type=pattern.pattern_type,
                )
            )
        )
    }


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.02)


def test_authorize_throws_on_non_literal_resource(authorizer1: AclAuthorizer) -> None:
    with pytest.raises(ValueError, match="only literal"):
        authorize(authorizer1, READ, topic("something", PatternType.PREFIXED))


def test_authorize_with_empty_resource_name(authorizer1: AclAuthorizer) -> None:
    group = ResourcePattern(
        resource_type=ResourceType.GROUP, name="", pattern_type=PatternType.LITERAL
    )
    assert not authorize(authorizer1, READ, group)
    add_acls(
        authorizer1,
        {ALLOW_READ},
        ResourcePattern(
            resource_type=ResourceType.GROUP,
            name=WILDCARD_RESOURCE,
            pattern_type=PatternType.LITERAL,
        ),
    )
    assert authorize(authorizer1, READ, group)


def test_empty_resource_name_acl_is_an_error(authorizer1: AclAuthorizer) -> None:
    group = ResourcePattern(
        resource_type=ResourceType.GROUP, name="", pattern_type=PatternType.LITERAL
    )
    [result] = authorizer1.create_acls([AclBinding(pattern=group, entry=ALLOW_READ)])
    assert result.error is not None


def test_topic_acl(authorizer1: AclAuthorizer) -> None:
    user1, user2, user3 = str(PRINCIPAL), "User:rob", "User:batman"
    host1, host2 = "192.168.1.1", "192.168.1.2"
    add_acls(
        authorizer1,
        {
            ace(user1, host1, READ, ALLOW),
            ace(user1, host2, READ, ALLOW),
            ace(user1, host1, READ, DENY),
            ace(user1, host1, WRITE, ALLOW),
            ace(user1, WILDCARD_HOST, DESCRIBE, ALLOW),
            ace(user2, WILDCARD_HOST, READ, ALLOW),
            ace(user3, WILDCARD_HOST, WRITE, ALLOW),
        },
        RESOURCE,
    )
    assert authorize(authorizer1, READ, RESOURCE, host=host2)
    assert not authorize(authorizer1, READ, RESOURCE, host=host1)  # the DENY
    assert authorize(authorizer1, WRITE, RESOURCE, host=host1)
    assert not authorize(authorizer1, WRITE, RESOURCE, host=host2)
    assert authorize(authorizer1, DESCRIBE, RESOURCE, host=host1)
    assert authorize(authorizer1, DESCRIBE, RESOURCE, host=host2)
    assert not authorize(authorizer1, AclOperation.ALTER, RESOURCE, host=host1)
    rob, batman = KafkaPrincipal("User", "rob"), KafkaPrincipal("User", "batman")
    assert authorize(authorizer1, DESCRIBE, RESOURCE, principal=rob, host=host1)
    assert authorize(authorizer1, DESCRIBE, RESOURCE, principal=batman, host=host1)
    assert authorize(authorizer1, READ, RESOURCE, principal=rob, host=host1)
    assert authorize(authorizer1, WRITE, RESOURCE, principal=batman, host=host1)


def test_deny_takes_precedence(authorizer1: AclAuthorizer) -> None:
    add_acls(
        authorizer1,
        {
            ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, AclOperation.ALL, ALLOW),
            ace(str(PRINCIPAL), "192.168.2.1", AclOperation.ALL, DENY),
        },
        RESOURCE,
    )
    assert not authorize(authorizer1, READ, RESOURCE, host="192.168.2.1")


def test_allow_all_access(authorizer1: AclAuthorizer) -> None:
    add_acls(
        authorizer1, {ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, AclOperation.ALL, ALLOW)}, RESOURCE
    )
    assert authorize(
        authorizer1, READ, RESOURCE, principal=KafkaPrincipal("User", "random"), host="192.0.4.4"
    )


def test_super_user_has_access(authorizer1: AclAuthorizer) -> None:
    add_acls(
        authorizer1, {ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, AclOperation.ALL, DENY)}, RESOURCE
    )
    for name in ("superuser1", "superuser2"):
        assert authorize(authorizer1, READ, RESOURCE, principal=KafkaPrincipal("User", name))
    assert not authorize(authorizer1, READ, RESOURCE)


def test_wildcard_acls(authorizer1: AclAuthorizer) -> None:
    assert not authorize(authorizer1, READ, RESOURCE)
    host1 = "192.168.3.1"
    add_acls(authorizer1, {ace(str(PRINCIPAL), host1, READ, ALLOW)}, WILDCARD)
    assert authorize(authorizer1, READ, RESOURCE, host=host1)
    add_acls(authorizer1, {ace(str(PRINCIPAL), host1, WRITE, ALLOW)}, RESOURCE)
    add_acls(authorizer1, {ace(str(PRINCIPAL), host1, WRITE, DENY)}, WILDCARD)
    assert not authorize(authorizer1, WRITE, RESOURCE, host=host1)


def test_no_acl_found(authorizer1: AclAuthorizer) -> None:
    assert not authorize(authorizer1, READ, RESOURCE)


def test_no_acl_found_override(make_authorizer: Callable[..., AclAuthorizer]) -> None:
    assert authorize(make_authorizer(allow_everyone=" true "), READ, RESOURCE)


def test_acl_inheritance(authorizer1: AclAuthorizer) -> None:
    every = {
        op
        for op in AclOperation
        if op not in (AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL)
    }
    implications = [
        (AclOperation.ALL, every),
        (READ, {DESCRIBE}),
        (WRITE, {DESCRIBE}),
        (AclOperation.DELETE, {DESCRIBE}),
        (AclOperation.ALTER, {DESCRIBE}),
        (AclOperation.ALTER_CONFIGS, {AclOperation.DESCRIBE_CONFIGS}),
    ]
    for parent, implied in implications:
        acl = ace(str(PRINCIPAL), WILDCARD_HOST, parent, ALLOW)
        add_acls(authorizer1, {acl}, CLUSTER)
        for op in every:
            expected = op in implied or op == parent
            assert authorize(authorizer1, op, CLUSTER) == expected, (parent, op)
        remove_acls(authorizer1, {acl}, CLUSTER)
    for parent, denied in [
        (AclOperation.ALL, every),
        (DESCRIBE, set()),
        (AclOperation.DESCRIBE_CONFIGS, set()),
    ]:
        acls = {
            ace(str(PRINCIPAL), WILDCARD_HOST, parent, DENY),
            ace(str(PRINCIPAL), WILDCARD_HOST, AclOperation.ALL, ALLOW),
        }
        add_acls(authorizer1, acls, CLUSTER)
        for op in every:
            expected_denied = op in denied or op == parent
            assert authorize(authorizer1, op, CLUSTER) != expected_denied, (parent, op)
        remove_acls(authorizer1, acls, CLUSTER)


def test_acl_management_apis(authorizer1: AclAuthorizer, tree: LocalZNodeTree) -> None:
    acl1 = ace("User:alice", "host1", READ, ALLOW)
    acl2 = ace("User:alice", "host1", WRITE, ALLOW)
    acl3 = ace("User:bob", "host2", READ, ALLOW)
    acl5 = ace("User:bob", WILDCARD_HOST, READ, ALLOW)
    add_acls(authorizer1, {acl1, acl2, acl3}, RESOURCE)
    add_acls(authorizer1, {acl5}, RESOURCE)  # additive
    assert get_acls(authorizer1, RESOURCE) == {acl1, acl2, acl3, acl5}
    by_bob = authorizer1.acls(
        AclBindingFilter(entry_filter=AccessControlEntryFilter(principal="User:bob"))
    )
    assert {b.entry for b in by_bob} == {acl3, acl5}
    remove_acls(authorizer1, {acl1, acl5}, RESOURCE)
    assert get_acls(authorizer1, RESOURCE) == {acl2, acl3}
    remove_acls(authorizer1, set(), RESOURCE)
    assert get_acls(authorizer1, RESOURCE) == set()
    session = tree.session()
    assert session.exists(f"/kafka-acl/Topic/{RESOURCE.name}") is None  # the last ACL took it


def test_load_cache(
    authorizer1: AclAuthorizer, make_authorizer: Callable[..., AclAuthorizer], tree: LocalZNodeTree
) -> None:
    resource1 = topic("test-2")
    add_acls(authorizer1, {ace("User:alice", "host-1", READ, ALLOW)}, RESOURCE)
    add_acls(authorizer1, {ace("User:bob", "host3", READ, DENY)}, resource1)
    session = tree.session()
    for path in ("/kafka-acl-changes", "/kafka-acl-extended-changes"):
        for child in session.get_children(path):
            session.delete(f"{path}/{child}")
    fresh = make_authorizer()
    assert get_acls(fresh, RESOURCE) == {ace("User:alice", "host-1", READ, ALLOW)}
    assert get_acls(fresh, resource1) == {ace("User:bob", "host3", READ, DENY)}


def test_change_on_one_broker_reaches_another(
    authorizer1: AclAuthorizer, make_authorizer: Callable[..., AclAuthorizer]
) -> None:
    authorizer2 = make_authorizer()
    add_acls(authorizer1, {ALLOW_READ}, PREFIXED)
    wait_until(lambda: authorize(authorizer2, READ, RESOURCE), "broker 2 sees the new ACL")
    remove_acls(authorizer1, set(), PREFIXED)
    wait_until(lambda: not authorize(authorizer2, READ, RESOURCE), "broker 2 sees it removed")


def test_concurrent_modification_from_two_brokers(
    authorizer1: AclAuthorizer, make_authorizer: Callable[..., AclAuthorizer]
) -> None:
    """Two brokers adding to one resource without seeing each other's change first: the
    conditional write makes the second re-read and keep both."""
    authorizer2 = make_authorizer()
    authorizer2.close()  # it hears no notification: its cache stays behind
    add_acls(authorizer1, {ALLOW_READ}, RESOURCE)
    add_acls(authorizer2, {ALLOW_WRITE}, RESOURCE)
    wait_until(
        lambda: get_acls(authorizer1, RESOURCE) == {ALLOW_READ, ALLOW_WRITE}, "both ACLs kept"
    )


def test_wildcard_and_prefixed_resources(authorizer1: AclAuthorizer) -> None:
    add_acls(authorizer1, {ALLOW_READ}, WILDCARD)
    assert authorize(authorizer1, READ, RESOURCE)
    remove_acls(authorizer1, set(), WILDCARD)
    add_acls(authorizer1, {ALLOW_READ, ALLOW_WRITE}, PREFIXED)
    assert authorize(authorizer1, READ, RESOURCE)
    remove_acls(authorizer1, {ALLOW_READ}, PREFIXED)
    assert get_acls(authorizer1, PREFIXED) == {ALLOW_WRITE}
    assert get_acls(authorizer1, WILDCARD) == set()


def test_authorize_with_prefixed_resource(authorizer1: AclAuthorizer) -> None:
    for name, pattern_type in [
        ("a_other", PatternType.LITERAL),
        ("a_other", PatternType.PREFIXED),
        ("foo-" + uuid.uuid4().hex, PatternType.PREFIXED),
        ("foo-" + uuid.uuid4().hex + "-zzz", PatternType.PREFIXED),
        ("fooo-" + uuid.uuid4().hex, PatternType.PREFIXED),
        ("fo-" + uuid.uuid4().hex, PatternType.PREFIXED),
        ("fon-", PatternType.PREFIXED),
        ("z_other", PatternType.PREFIXED),
        ("z_other", PatternType.LITERAL),
    ]:
        add_acls(authorizer1, {DENY_READ}, topic(name, pattern_type))
    add_acls(authorizer1, {ALLOW_READ}, PREFIXED)
    assert authorize(authorizer1, READ, RESOURCE)


def test_single_character_resource_acls(authorizer1: AclAuthorizer) -> None:
    add_acls(authorizer1, {ALLOW_READ}, topic("f"))
    assert authorize(authorizer1, READ, topic("f"))
    assert not authorize(authorizer1, READ, topic("foo"))
    add_acls(authorizer1, {ALLOW_READ}, topic("_", PatternType.PREFIXED))
    assert authorize(authorizer1, READ, topic("_foo"))
    assert authorize(authorizer1, READ, topic("_"))
    assert not authorize(authorizer1, READ, topic("foo_"))


def test_acls_filter(authorizer1: AclAuthorizer) -> None:
    resource1 = topic("foo-" + uuid.uuid4().hex)
    resource2 = topic("bar-" + uuid.uuid4().hex)
    prefixed = topic("bar-", PatternType.PREFIXED)
    acl1 = AclBinding(pattern=resource1, entry=ace(str(PRINCIPAL), WILDCARD_HOST, READ, ALLOW))
    acl2 = AclBinding(pattern=resource1, entry=ace(str(PRINCIPAL), "192.168.0.1", WRITE, ALLOW))
    acl3 = AclBinding(pattern=resource2, entry=ace(str(PRINCIPAL), WILDCARD_HOST, DESCRIBE, ALLOW))
    acl4 = AclBinding(pattern=prefixed, entry=ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, READ, ALLOW))
    authorizer1.create_acls([acl1, acl2, acl3, acl4])

    def exact(p: ResourcePattern) -> ResourcePatternFilter:
        return ResourcePatternFilter(
            resource_type=p.resource_type, name=p.name, pattern_type=p.pattern_type
        )

    assert set(authorizer1.acls(AclBindingFilter())) == {acl1, acl2, acl3, acl4}
    assert set(authorizer1.acls(AclBindingFilter(pattern_filter=exact(resource1)))) == {
        acl1,
        acl2,
    }
    assert set(authorizer1.acls(AclBindingFilter(pattern_filter=exact(prefixed)))) == {acl4}
    matching = AclBindingFilter(
        pattern_filter=ResourcePatternFilter(name=resource2.name, pattern_type=PatternType.MATCH)
    )
    assert set(authorizer1.acls(matching)) == {acl3, acl4}
    acl1_filter = AclBindingFilter(
        pattern_filter=exact(resource1),
        entry_filter=AccessControlEntryFilter(
            principal=acl1.entry.principal,
            host=acl1.entry.host,
            operation=acl1.entry.operation,
            permission_type=acl1.entry.permission_type,
        ),
    )
    results = authorizer1.delete_acls(
        [
            matching,
            acl1_filter,
            AclBindingFilter(pattern_filter=exact(resource2)),
            AclBindingFilter(
                pattern_filter=ResourcePatternFilter(
                    resource_type=ResourceType.TOPIC, name="baz", pattern_type=PatternType.ANY
                )
            ),
        ]
    )
    assert all(r.error is None for per_filter in results for r in per_filter)
    assert [{r.binding for r in per_filter} for per_filter in results] == [
        {acl3, acl4},
        {acl1},
        set(),  # acl3 went with the first filter
        set(),
    ]


def test_invalid_resource_name_is_refused(authorizer1: AclAuthorizer) -> None:
    [result] = authorizer1.create_acls([AclBinding(pattern=topic("a/b"), entry=ALLOW_READ)])
    assert result.error is not None
    assert result.error.error_code == "invalid_request"
    assert "invalid resource name: a/b" in str(result.error)


def test_authorize_by_resource_type(authorizer1: AclAuthorizer) -> None:
    def any_topic() -> bool:
        return authorizer1.authorize_by_resource_type(PRINCIPAL, HOST, WRITE, ResourceType.TOPIC)

    assert not any_topic()
    add_acls(authorizer1, {ALLOW_WRITE}, topic("t1"))
    assert any_topic()
    add_acls(
        authorizer1,
        {ace(str(PRINCIPAL), WILDCARD_HOST, WRITE, DENY)},
        topic("t", PatternType.PREFIXED),
    )
    assert not any_topic()  # a prefixed DENY dominates the literal allow
    add_acls(authorizer1, {ALLOW_WRITE}, topic("other"))
    assert any_topic()
    add_acls(authorizer1, {ace(str(PRINCIPAL), WILDCARD_HOST, WRITE, DENY)}, WILDCARD)
    assert not any_topic()


def test_acl_znode_is_kafkas_json(authorizer1: AclAuthorizer, tree: LocalZNodeTree) -> None:
    add_acls(authorizer1, {ALLOW_READ}, PREFIXED)
    session = tree.session()
    data, _stat = session.get("/kafka-acl-extended/prefixed/Topic/foo")
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    [change] = session.get_children("/kafka-acl-extended-changes")
    assert change.startswith("acl_changes_") and len(change) == len("acl_changes_") + 10
    event = json.loads(session.get(f"/kafka-acl-extended-changes/{change}")[0])
    assert event == {
        "version": 1,
        "resourceType": "TOPIC",
        "name": "foo",
        "patternType": "PREFIXED",
    }


def test_denials_are_audited_once_per_interval(
    authorizer1: AclAuthorizer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kafka.authorizer.logger")
    for _ in range(3):
        assert not authorize(authorizer1, WRITE, topic("t"), host="127.0.0.1")
    lines = [r.getMessage() for r in caplog.records if r.name == "kafka.authorizer.logger"]
    assert lines == [
        "Principal = User:alice is Denied Operation = Write from host = 127.0.0.1 on resource ="
        " Topic:LITERAL:t for request = Produce with resourceRefCount = 1"
    ]


def test_authorized_operations_bits() -> None:
    assert authorized_operations_bits({READ, WRITE, DESCRIBE}) == (1 << 3) | (1 << 4) | (1 << 8)


def test_a_separate_acl_zookeeper_is_refused_naming_it(tree: LocalZNodeTree) -> None:
    props = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "authorizer.zookeeper.url": "zk2:2181",
    }
    with pytest.raises(InvalidConfigError, match=r"^authorizer\.zookeeper\.url asks for ACLs"):
        authorizer_from_config(props, tree.session())
    assert authorizer_from_config({}, tree.session()) is None
