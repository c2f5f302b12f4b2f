"""Fuzzing the SASL exchange: whatever bytes a client sends (random, truncated, valid frames
cut short or out of order), the mechanisms raise only their SASL errors and the per-connection
state machine only answers or closes; the client side of SCRAM (the broker's own connections)
raises only SaslError on whatever a server answers."""

from __future__ import annotations

import asyncio
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.protocol.messages import build, request_schema
from storage_core.security.credential_cache import CredentialCache
from storage_core.security.plain.plain_sasl_server import PlainSaslServer
from storage_core.security.sasl_errors import SaslAuthenticationError, SaslError
from storage_core.security.scram.scram_credential import ScramCredential, credential_to_string
from storage_core.security.scram.scram_mechanism import ScramMechanism
from storage_core.security.scram.scram_sasl_client import ScramSaslClient
from storage_core.security.scram.scram_sasl_server import ScramSaslServer
from storage_core.server.protocol import encode_request
from storage_core.server.sasl_config import SaslListenerConfig
from storage_core.server.sasl_server_authenticator import (
    AuthenticationStep,
    SaslServerAuthenticator,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SHA256 = ScramMechanism.SCRAM_SHA_256
CREDENTIAL = ScramCredential.generate(SHA256, "pw", 4096, salt=b"salt")
CACHE = CredentialCache()
CACHE.update_credentials("alice", {"SCRAM-SHA-256": credential_to_string(CREDENTIAL)})
CONFIG = SaslListenerConfig.from_props(
    {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=pw;"
        ),
        "connection.failed.authentication.delay.ms": "0",
    },
    "SASL_PLAINTEXT",
)


def _frame(api_key: int, version: int, **fields: object) -> bytes:
    encoded = encode_request(
        api_key, version, 1, "fuzz", build(request_schema(api_key, version), **fields)
    )
    return encoded[4:]  # the socket server hands over frames without their size prefix


VALID_FRAMES = [
    _frame(18, 0),
    _frame(18, 3, client_software_name="fuzz", client_software_version="1"),
    _frame(17, 0, mechanism="PLAIN"),
    _frame(17, 1, mechanism="PLAIN"),
    _frame(17, 1, mechanism="SCRAM-SHA-256"),
    _frame(17, 1, mechanism="GSSAPI"),
    _frame(36, 0, auth_bytes=b"\0alice\0pw"),
    _frame(36, 1, auth_bytes=b"n,,n=alice,r=abc"),
    _frame(36, 2, auth_bytes=b"c=biws,r=abc,p=AAAA"),
    _frame(3, 1, topics=None),
]
frames = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(VALID_FRAMES),
    st.sampled_from(VALID_FRAMES).flatmap(
        lambda f: st.integers(0, len(f)).map(lambda n: f[:n])  # cut short
    ),
    st.sampled_from(VALID_FRAMES).flatmap(
        lambda f: st.binary(min_size=1, max_size=8).map(lambda tail: f + tail)
    ),
    st.builds(
        lambda key, version, rest: struct.pack(">hhi", key, version, 1) + rest,
        st.integers(-5, 80),
        st.integers(-2, 20),
        st.binary(max_size=40),
    ),
)


async def _api_versions(frame: bytes) -> bytes | None:
    # the socket server's ApiVersions answer, reduced to what the authenticator reads
    return struct.pack(">iih", 6, 1, 0)


@SETTINGS
@given(st.lists(frames, min_size=1, max_size=8))
def test_the_state_machine_only_answers_or_closes(sequence: list[bytes]) -> None:
    authenticator = SaslServerAuthenticator(
        CONFIG, CACHE, client="fuzz:1", answer_api_versions=_api_versions
    )

    async def run() -> None:
        for frame in sequence:
            if authenticator.complete and not authenticator.maybe_begin_reauthentication(frame):
                return  # the API layer's
            step = await authenticator.authenticate(frame)
            assert isinstance(step, AuthenticationStep)
            assert step.response is None or isinstance(step.response, bytes)
            if step.close:
                return

    asyncio.run(run())


@SETTINGS
@given(st.lists(st.binary(max_size=400), min_size=1, max_size=3))
def test_mechanisms_raise_only_sasl_errors(tokens: list[bytes]) -> None:
    servers = [
        PlainSaslServer({"alice": "pw"}),
        ScramSaslServer(SHA256, CACHE.get),
        ScramSaslServer(ScramMechanism.SCRAM_SHA_512, CACHE.get),
    ]
    for server in servers:
        for token in tokens:
            try:
                assert isinstance(server.evaluate_response(token), bytes)
            except (SaslError, SaslAuthenticationError):
                break


@SETTINGS
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_the_scram_client_raises_only_sasl_errors(first: bytes, final: bytes) -> None:
    client = ScramSaslClient(SHA256, "alice", "pw", nonce="abc")
    client.first()
    try:
        client.evaluate(first)
        client.evaluate(final)
    except SaslError:
        return
    raise AssertionError("random server messages were accepted")
