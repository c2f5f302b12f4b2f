"""A SASL listener's settings as Kafka reads them (a listener's own value over the broker's, a
mechanism's over both), the refusals that name what to do, the brokers' own login on a SASL
inter-broker listener, and a client's SASL settings (never shown in a repr or a message)."""

from __future__ import annotations

import re

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.security.client_transport import ClientSecurityConfig
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.server.listeners import inter_broker_client_security
from storage_core.server.sasl_config import SaslListenerConfig, inter_broker_credentials
from storage_core.server.sasl_server_authenticator import SaslState, is_valid_transition

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="broker" password="broker-pw" user_broker="broker-pw" user_alice="alice-pw";'
)


def test_listener_and_mechanism_values_win_over_the_broker_ones() -> None:
    props = {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-512, PLAIN",
        "listener.name.external.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": "60000",
        "listener.name.external.scram-sha-512.connections.max.reauth.ms": "5000",
        "listener.name.external.sasl.server.max.receive.size": "1024",
        "connection.failed.authentication.delay.ms": "250",
    }
    config = SaslListenerConfig.from_props(props, "EXTERNAL")
    assert config.enabled_mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert dict(config.plain_users) == {"broker": "broker-pw", "alice": "alice-pw"}
    assert dict(config.connections_max_reauth_ms) == {"SCRAM-SHA-512": 5000, "PLAIN": 60000}
    assert (config.max_receive_size, config.failed_authentication_delay_ms) == (1024, 250)
    assert "alice-pw" not in repr(config)
    defaults = SaslListenerConfig.from_props({"sasl.enabled.mechanisms": "SCRAM-SHA-256"}, "X")
    assert (defaults.max_receive_size, defaults.failed_authentication_delay_ms) == (524288, 100)
    assert dict(defaults.connections_max_reauth_ms) == {"SCRAM-SHA-256": 0}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({}, "sasl.enabled.mechanisms (Kafka's default)=GSSAPI asks for GSSAPI"),
        ({"sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN"}, "asks for OAUTHBEARER"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "listener.name.l.plain.sasl.jaas.config is not set"),
        (
            {"sasl.enabled.mechanisms": "SCRAM-SHA-256", "connections.max.reauth.ms": "-1"},
            "connections.max.reauth.ms=-1 is outside",
        ),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "listener.name.l.plain.sasl.jaas.config": "x"},
            "needs a flag",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.l.plain.sasl.jaas.config": PLAIN_JAAS.replace(
                    "plain.PlainLoginModule", "scram.ScramLoginModule"
                ),
            },
            "must use org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
    ],
)
def test_refusals_name_the_setting(props: dict[str, str], message: str) -> None:
    with pytest.raises(
        InvalidConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
    ) as e:
        SaslListenerConfig.from_props(props, "L")
    assert "broker-pw" not in str(e.value)


def test_the_brokers_own_login_on_a_sasl_inter_broker_listener() -> None:
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    assert inter_broker_credentials(props, "SASL_PLAINTEXT") == ("PLAIN", "broker", "broker-pw")
    security = inter_broker_client_security(props)
    assert security.security_protocol is SecurityProtocol.SASL_PLAINTEXT
    assert "broker-pw" not in repr(security)
    with pytest.raises(
        InvalidConfigError, match=re.escape("scram-sha-256.sasl.jaas.config must name")
    ):
        inter_broker_credentials(
            {**props, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"}, "SASL_PLAINTEXT"
        )
    with pytest.raises(InvalidConfigError, match="GSSAPI is not supported"):
        inter_broker_credentials(
            {k: v for k, v in props.items() if k != "sasl.mechanism.inter.broker.protocol"},
            "SASL_PLAINTEXT",
        )


def test_client_sasl_settings() -> None:
    jaas = ClientSecurityConfig.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule"
            ' required username="etl" password="etl-pw";',
        }
    )
    assert "etl-pw" not in repr(jaas)
    plain = ClientSecurityConfig.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "etl",
            "sasl.password": "etl-pw",
        }
    )
    assert plain.security_protocol is SecurityProtocol.SASL_PLAINTEXT
    with pytest.raises(InvalidConfigError, match="needs a username and a password"):
        ClientSecurityConfig.from_properties(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
        )
    with pytest.raises(
        InvalidConfigError, match=re.escape("sasl.mechanism=GSSAPI is not supported")
    ):
        ClientSecurityConfig.from_properties({"security.protocol": "SASL_SSL"})


def test_sasl_state_transitions_are_kafkas() -> None:
    s = SaslState
    assert is_valid_transition(s.INITIAL_REQUEST, s.HANDSHAKE_OR_VERSIONS_REQUEST)
    assert is_valid_transition(s.HANDSHAKE_OR_VERSIONS_REQUEST, s.AUTHENTICATE)
    assert is_valid_transition(s.COMPLETE, s.REAUTH_PROCESS_HANDSHAKE)
    assert is_valid_transition(s.AUTHENTICATE, s.AUTHENTICATE)  # idempotent
    assert all(is_valid_transition(state, s.FAILED) for state in s)
    assert not is_valid_transition(s.INITIAL_REQUEST, s.COMPLETE)  # no shortcut to success
    assert not is_valid_transition(s.HANDSHAKE_REQUEST, s.HANDSHAKE_OR_VERSIONS_REQUEST)
    assert not is_valid_transition(s.FAILED, s.AUTHENTICATE)
    assert not is_valid_transition(s.REAUTH_BAD_MECHANISM, s.AUTHENTICATE)
