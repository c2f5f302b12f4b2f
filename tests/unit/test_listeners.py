"""Listeners as Kafka's KafkaConfig reads and checks them: names and protocols, the defaults of
advertised.listeners and listener.security.protocol.map, the inter-broker listener, Kafka's
error messages, and per-listener overrides (listener.name.<l>.<config>)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.server.dynamic_broker_config import (
    BrokerConfigUpdateError,
    validate_broker_configs,
)
from storage_core.server.kafka_config import KafkaConfig
from storage_core.server.listeners import (
    EndPoint,
    ListenerSecurity,
    inter_broker_client_security,
    listener_prefix,
    values_with_prefix_override,
)
from tests.security_support import TestPki, ssl_listener_props


def config(tmp_path: Path, **props: str) -> KafkaConfig:
    return KafkaConfig.from_props({"log.dirs": str(tmp_path), **props})


def test_several_listeners_with_their_protocols(tmp_path: Path) -> None:
    broker = config(
        tmp_path,
        listeners="CLIENT://:9092,REPLICATION://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9094",
        **{
            "listener.security.protocol.map": "CLIENT:SSL,REPLICATION:SSL,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "replication",
        },
    )
    assert [(e.listener_name, e.host, e.port, e.security_protocol) for e in broker.listeners()] == [
        ("CLIENT", "", 9092, SecurityProtocol.SSL),
        ("REPLICATION", "127.0.0.1", 9093, SecurityProtocol.SSL),
        ("PLAINTEXT", "127.0.0.1", 9094, SecurityProtocol.PLAINTEXT),
    ]
    # advertised.listeners defaults to listeners
    assert broker.effective_advertised_listeners() == broker.listeners()
    assert broker.inter_broker_listener() == ("REPLICATION", SecurityProtocol.SSL)


def test_security_inter_broker_protocol_names_the_listener_of_that_name(tmp_path: Path) -> None:
    broker = config(
        tmp_path,
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        **{"security.inter.broker.protocol": "SSL"},
    )
    assert broker.inter_broker_listener() == ("SSL", SecurityProtocol.SSL)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"listeners": "INTERNAL://127.0.0.1:9092"},
            "No security protocol defined for listener INTERNAL",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"},
            "Each listener must have a different name",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092"},
            "Each listener must have a different port",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
                "inter.broker.listener.name": "SSL",
                "security.inter.broker.protocol": "SSL",
            },
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should"
            " be set.",
        ),
        (
            {"listeners": "SSL://127.0.0.1:9093"},
            "inter.broker.listener.name must be a listener name defined in advertised.listeners."
            " The valid options based on currently configured listeners are SSL",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092",
                "advertised.listeners": "PLAINTEXT://h:9092,SSL://h:9093",
            },
            "advertised.listeners listener names must be equal to or a subset of the ones"
            " defined in listeners",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092",
                "inter.broker.listener.name": "REPLICATION",
            },
            "Listener with name REPLICATION defined in inter.broker.listener.name not found in"
            " listener.security.protocol.map.",
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:TLS"},
            "unknown security protocol 'TLS'",
        ),
    ],
)
def test_kafkas_checks_and_messages(tmp_path: Path, props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as refused:
        config(tmp_path, **props)
    assert message in str(refused.value)


def test_advertised_listeners_may_share_a_port(tmp_path: Path) -> None:
    broker = config(
        tmp_path,
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        **{"advertised.listeners": "PLAINTEXT://proxy:9000,SSL://proxy:9000"},
    )
    assert [e.port for e in broker.advertised_listeners()] == [9000, 9000]


def test_a_listeners_own_setting_wins_over_the_plain_one() -> None:
    props = {
        "ssl.client.auth": "none",
        "ssl.keystore.type": "PEM",
        "listener.name.client.ssl.client.auth": "required",
        "listener.name.other.ssl.client.auth": "requested",
    }
    values = values_with_prefix_override(props, listener_prefix("CLIENT"))
    assert values["ssl.client.auth"] == "required"
    assert values["ssl.keystore.type"] == "PEM"
    assert not any(k.startswith("listener.name.") for k in values)


def test_the_broker_connects_to_peers_with_its_inter_broker_listeners_settings(
    tmp_path: Path,
) -> None:
    pki = TestPki(tmp_path)
    broker = pki.issue("broker", "CN=broker-1,O=test")
    security = inter_broker_client_security(
        {
            "listeners": "CLIENT://:9092,REPLICATION://:9093",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:SSL",
            "inter.broker.listener.name": "REPLICATION",
            "ssl.truststore.type": "JKS",  # the plain setting: the listener's own wins
            **ssl_listener_props(pki, broker, prefix="listener.name.replication."),
        }
    )
    assert security.security_protocol is SecurityProtocol.SSL
    assert security.settings["ssl.truststore.type"] == "PEM"
    assert security.settings["ssl.keystore.location"] == str(broker.pem_keystore)
    assert security.ssl_context().check_hostname  # https by default


@pytest.mark.parametrize(
    "name",
    [
        "listener.name.ssl.ssl.keystore.location",
        "listener.name.ssl.ssl.client.auth",
        "listener.name.client.ssl.principal.mapping.rules",
        "listeners",
        "advertised.listeners",
        "listener.name.sasl_ssl.plain.sasl.jaas.config",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms",
        "listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms",
        "connections.max.reauth.ms",
    ],
)
def test_tls_and_listener_settings_are_not_changed_while_the_broker_runs(name: str) -> None:
    """Read once when the listeners start: AlterConfigs refuses them rather than keeping a
    value the broker would ignore."""
    with pytest.raises(
        BrokerConfigUpdateError, match="cannot change TLS, SASL or listener settings"
    ):
        validate_broker_configs({name: "x"}, per_broker=True)


def test_an_unprefixed_key_store_setting_keeps_kafkas_message() -> None:
    with pytest.raises(
        BrokerConfigUpdateError, match="only per-listener using the listener prefix"
    ):
        validate_broker_configs({"ssl.keystore.location": "/x"}, per_broker=True)


def test_a_listener_with_a_rule_that_does_not_parse_is_refused_naming_it(tmp_path: Path) -> None:
    pki = TestPki(tmp_path)
    broker = pki.issue("broker", "CN=localhost,O=test")
    props = {
        **ssl_listener_props(pki, broker),
        "listener.name.client.ssl.principal.mapping.rules": "RULE:^CN=(.*?)$/$1/LU",
    }
    endpoint = EndPoint(
        listener_name="CLIENT", host="", port=0, security_protocol=SecurityProtocol.SSL
    )
    with pytest.raises(InvalidConfigError) as refused:
        ListenerSecurity.for_endpoint(props, endpoint)
    message = str(refused.value)
    assert message.startswith("listener CLIENT (SSL): ssl.principal.mapping.rules:")
    assert "Invalid rule: `RULE:^CN=(.*?)$/$1/LU`, unmatched substring: `U`" in message
