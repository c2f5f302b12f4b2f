"""SCRAM credentials in the users' config entities as Kafka's ZooKeeper mode writes them, their
change notifications, the brokers' CredentialCache refreshed from them, and
Describe/AlterUserScramCredentials' rules (ZkAdminManager) over the single-node store."""

from __future__ import annotations

import json
import time

from kio.schema.errors import ErrorCode

from storage_core.security.credential_cache import CredentialProvider
from storage_core.security.scram.scram_formatter import ScramFormatter
from storage_core.security.scram.scram_mechanism import ScramMechanism
from storage_core.security.scram.scram_sasl_client import ScramSaslClient
from storage_core.security.scram.scram_sasl_server import ScramSaslServer
from storage_core.server import user_scram_credentials as usc
from storage_core.server.user_scram_credentials import Deletion, Upsertion
from storage_core.zk.config_entity import (
    CONFIG_CHANGES_PATH,
    ConfigChangeListener,
    ConfigEntityZkStore,
)
from storage_core.zk.local_znode_tree import LocalZNodeTree
from tests.single_node_support import wait_for

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def upsertion(
    name: str, mechanism: ScramMechanism, password: str, iterations: int = 8192
) -> Upsertion:
    salt = b"salt"
    salted = ScramFormatter(mechanism).salted_password(password, salt, iterations)
    return Upsertion(
        name=name,
        mechanism=mechanism.type_id,
        iterations=iterations,
        salt=salt,
        salted_password=salted,
    )


def authenticates(
    provider: CredentialProvider, user: str, password: str, m: ScramMechanism
) -> bool:
    server = ScramSaslServer(m, provider.cache.get)
    client = ScramSaslClient(m, user, password)
    try:
        client.evaluate(
            server.evaluate_response(client.evaluate(server.evaluate_response(client.first())))
        )
    except Exception:
        return False
    return server.is_complete


def test_alter_writes_kafka_layout_and_every_broker_cache_follows() -> None:
    tree = LocalZNodeTree(None)
    admin_session, broker_session = tree.session(), tree.session()
    admin_session.start()
    broker_session.start()
    store = ConfigEntityZkStore(admin_session)
    store.create_paths()
    other_broker = CredentialProvider(broker_session)
    other_broker.start()
    try:
        results = usc.alter(
            store,
            [upsertion("al ice*", SHA256, "pw256"), upsertion("al ice*", SHA512, "pw512")],
            [],
        )
        assert [(r.user, r.error_code) for r in results] == [("al ice*", ErrorCode.none)]
        data, _ = admin_session.get("/config/users/al%20ice%2A")
        document = json.loads(data)
        assert document["version"] == 1
        assert sorted(document["config"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert document["config"]["SCRAM-SHA-256"].startswith("salt=c2FsdA==,stored_key=")
        assert document["config"]["SCRAM-SHA-256"].endswith(",iterations=8192")
        notes = admin_session.get_children(CONFIG_CHANGES_PATH)
        assert notes and all(n.startswith("config_change_") and len(n) == 24 for n in notes)
        note = json.loads(admin_session.get(f"{CONFIG_CHANGES_PATH}/{sorted(notes)[-1]}")[0])
        assert note == {"version": 2, "entity_path": "users/al%20ice%2A"}
        wait_for(lambda: authenticates(other_broker, "al ice*", "pw512", SHA512), timeout_s=5)
        assert not authenticates(other_broker, "al ice*", "pw256", SHA512)

        described = usc.describe(store, None)
        assert [(r.user, r.credential_infos) for r in described] == [
            ("al ice*", ((1, 8192), (2, 8192)))
        ]
        # delete one mechanism: the other broker refuses it within moments
        assert usc.alter(store, [], [Deletion(name="al ice*", mechanism=2)])[0].error_code == 0
        wait_for(lambda: not authenticates(other_broker, "al ice*", "pw512", SHA512), timeout_s=5)
        assert authenticates(other_broker, "al ice*", "pw256", SHA256)
        assert usc.alter(store, [], [Deletion(name="al ice*", mechanism=1)])[0].error_code == 0
        assert admin_session.exists("/config/users/al%20ice%2A") is None
        missing = usc.describe(store, ["al ice*"])[0]
        assert missing.error_code == ErrorCode.resource_not_found
    finally:
        other_broker.close()


def test_alter_and_describe_errors_as_kafka() -> None:
    session = LocalZNodeTree(None).session()
    session.start()
    store = ConfigEntityZkStore(session)
    results = usc.alter(
        store,
        [
            upsertion("", SHA256, "x"),
            upsertion("few", SHA256, "x", iterations=4095),
            upsertion("many", SHA256, "x", iterations=16385),
            Upsertion(name="mech", mechanism=9, iterations=8192, salt=b"s", salted_password=b"p"),
            upsertion("twice", SHA256, "x"),
            upsertion("twice", SHA256, "y"),
            upsertion("ok", SHA256, "x", iterations=16384),
        ],
        [Deletion(name="nothing", mechanism=1)],
    )
    by_user = {r.user: (r.error_code, r.error_message) for r in results}
    assert by_user == {
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "few": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "many": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "mech": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "twice": (
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        ),
        "nothing": (
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        ),
        "ok": (ErrorCode.none, None),
    }
    assert store.get_all_users() == ["ok"]
    described = usc.describe(store, ["ok", "nobody", "", "ok"])
    assert [(r.user, r.error_code) for r in described] == [
        ("ok", ErrorCode.duplicate_resource),
        ("nobody", ErrorCode.resource_not_found),
        ("", ErrorCode.resource_not_found),
    ]


def test_notifications_older_than_the_expiry_are_purged() -> None:
    session = LocalZNodeTree(None).session()
    session.start()
    store = ConfigEntityZkStore(session)
    usc.alter(store, [upsertion("u", SHA256, "x")], [])
    assert session.get_children(CONFIG_CHANGES_PATH)
    seen: list[tuple[str, str]] = []
    later_ms = int(time.time() * 1000) + 16 * 60 * 1000
    listener = ConfigChangeListener(
        session, lambda t, n: seen.append((t, n)), clock_ms=lambda: later_ms
    )
    listener.process_notifications()
    assert seen == [("users", "u")]
    assert session.get_children(CONFIG_CHANGES_PATH) == []
