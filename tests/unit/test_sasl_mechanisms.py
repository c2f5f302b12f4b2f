"""SASL mechanisms against Kafka's own golden vectors and cases (ScramFormatterTest,
ScramMessagesTest, ScramSaslServerTest, PlainSaslServerTest, SanitizerTest) and RFC 7677's
example, plus the client side run against the server side."""

from __future__ import annotations

import base64

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.security.jaas_config import parse_jaas_config
from storage_core.security.plain.plain_sasl_client import PlainSaslClient
from storage_core.security.plain.plain_sasl_server import PlainSaslServer
from storage_core.security.sanitizer import desanitize, sanitize
from storage_core.security.sasl_errors import SaslAuthenticationError, SaslError
from storage_core.security.scram.scram_credential import (
    InvalidScramCredentialError,
    ScramCredential,
    credential_from_string,
    credential_to_string,
)
from storage_core.security.scram.scram_formatter import (
    ScramFormatter,
    auth_message,
    sasl_name,
    secure_random_string,
    username,
)
from storage_core.security.scram.scram_mechanism import ScramMechanism
from storage_core.security.scram.scram_messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ServerFinalMessage,
    ServerFirstMessage,
)
from storage_core.security.scram.scram_sasl_client import ScramSaslClient
from storage_core.security.scram.scram_sasl_server import ScramSaslServer

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

# RFC 7677 section 3, as Kafka's ScramFormatterTest.rfc7677Example uses it
C1 = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
S1 = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
C2 = (
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
S2 = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_example_proof_and_signature() -> None:
    formatter = ScramFormatter(SHA256)
    client_first = ClientFirstMessage.parse(C1.encode())
    server_first = ServerFirstMessage.parse(S1.encode())
    client_final = ClientFinalMessage.parse(C2.encode())
    server_final = ServerFinalMessage.parse(S2.encode())
    assert client_first.sasl_name == "user"
    assert client_first.nonce == "rOprNGfwEbeRWgbNEkqO"
    assert server_first.nonce[len(client_first.nonce) :] == "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    assert server_first.salt == base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    assert server_first.iterations == 4096
    assert client_final.channel_binding == base64.b64decode("biws")
    salted = formatter.salted_password("pencil", server_first.salt, server_first.iterations)
    message = auth_message(
        client_first.bare, server_first.to_message(), client_final.without_proof()
    )
    assert formatter.client_proof(salted, message) == client_final.proof
    assert formatter.server_signature(formatter.server_key(salted), message) == (
        server_final.server_signature
    )
    assert SHA256.min_iterations == 4096


def test_rfc7677_example_through_the_server() -> None:
    credential = ScramCredential.generate(
        SHA256, "pencil", 4096, salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    )
    server = ScramSaslServer(SHA256, lambda name, mech: credential if name == "user" else None)
    first = server.evaluate_response(C1.encode())
    # the server's nonce is its own; the proof of the RFC's nonce cannot be replayed
    assert first.startswith(b"r=rOprNGfwEbeRWgbNEkqO") and first.endswith(
        b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    with pytest.raises(SaslError):
        server.evaluate_response(C2.encode())
    assert not server.is_complete


@pytest.mark.parametrize(
    "name", ["user1", "123", "1,2", "user=A", "user==B", "user,1", "user 1", ",", "=", ",=", "=="]
)
def test_sasl_name_escapes_round_trip(name: str) -> None:
    escaped = sasl_name(name)
    assert "," not in escaped
    assert username(escaped) == name
    message = ClientFirstMessage.parse(f"n,,n={escaped},r=abc".encode())
    assert username(message.sasl_name) == name


def test_sasl_name_with_a_bare_equals_is_refused() -> None:
    with pytest.raises(ValueError, match="=3D"):
        username("user=4")


VALID_EXTENSIONS = [
    "ext=val1",
    "anotherext=name1=value1 name2=another test value \"'!$[]()",
    "first=val1,second=name1 = value ,third=123",
]
INVALID_EXTENSIONS = ["ext1=value", "ext", "ext=value1,value2", "ext=,", "ext =value"]
VALID_RESERVED = ["m=reserved-value", "m=name1=value1 name2=another test value \"'!$[]()"]
INVALID_RESERVED = ["m", "m=name,value", "m=,"]


def test_client_first_messages_kafka_accepts() -> None:
    nonce = secure_random_string()
    assert ClientFirstMessage.parse(f"n,,n=testuser,r={nonce}".encode()).nonce == nonce
    assert ClientFirstMessage.parse(f"n,,n=test=2Cuser,r={nonce}".encode()).sasl_name == (
        "test=2Cuser"
    )
    authz = ClientFirstMessage.parse(f"n,a=testauthzid,n=testuser,r={nonce}".encode())
    assert authz.authorization_id == "testauthzid"
    for reserved in VALID_RESERVED:
        parsed = ClientFirstMessage.parse(f"n,,{reserved},n=testuser,r={nonce}".encode())
        assert (parsed.sasl_name, parsed.nonce) == ("testuser", nonce)
    for extension in VALID_EXTENSIONS:
        parsed = ClientFirstMessage.parse(f"n,,n=testuser,r={nonce},{extension}".encode())
        assert parsed.nonce == nonce and parsed.extensions
    token = ClientFirstMessage.parse(f"n,,n=testuser,r={nonce},tokenauth=true".encode())
    assert token.extensions["tokenauth"] == "true"


def test_messages_kafka_refuses() -> None:
    nonce = secure_random_string()
    salt = base64.b64encode(b"0123456789abcdef").decode()
    proof = base64.b64encode(b"p" * 32).decode()
    invalid: list[tuple[type, str]] = [
        (ClientFirstMessage, f"n,x=something,n=testuser,r={nonce}"),
        (ServerFirstMessage, f"r={nonce},s={salt},i=0"),
        (ServerFirstMessage, f"r={nonce},s==123,i=4096"),
        (ServerFirstMessage, f"r={nonce},invalid,s={salt},i=4096"),
        (ClientFinalMessage, f"c=ab,r={nonce},p={proof}"),
        (ClientFinalMessage, f"c=biws,r={nonce},p=123"),
        (ServerFinalMessage, "e=error1,error2"),
        (ServerFinalMessage, "v=1=23"),
    ]
    invalid += [(ClientFirstMessage, f"n,,{r},n=testuser,r={nonce}") for r in INVALID_RESERVED]
    invalid += [(ClientFirstMessage, f"n,,n=testuser,r={nonce},{e}") for e in INVALID_EXTENSIONS]
    invalid += [(ServerFirstMessage, f"{r},r={nonce},s={salt},i=4096") for r in INVALID_RESERVED]
    invalid += [(ServerFirstMessage, f"r={nonce},s={salt},i=4096,{e}") for e in INVALID_EXTENSIONS]
    invalid += [(ClientFinalMessage, f"c=biws,r={nonce},{e},p={proof}") for e in INVALID_EXTENSIONS]
    invalid += [(ServerFinalMessage, f"v={proof},{e}") for e in INVALID_EXTENSIONS]
    invalid += [(ServerFinalMessage, f"e=unknown-user,{e}") for e in INVALID_EXTENSIONS]
    for cls, text in invalid:
        with pytest.raises(SaslError):
            cls.parse(text.encode())  # type: ignore[attr-defined]


def _credentials(store: dict[tuple[str, ScramMechanism], ScramCredential]):  # type: ignore[no-untyped-def]
    return lambda name, mechanism: store.get((name, mechanism))


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
@pytest.mark.parametrize("user", ["alice", "us,er=1"])
def test_scram_client_and_server_authenticate(mechanism: ScramMechanism, user: str) -> None:
    store = {(user, mechanism): ScramCredential.generate(mechanism, "s3cret-ü", 8192)}
    server = ScramSaslServer(mechanism, _credentials(store))
    client = ScramSaslClient(mechanism, user, "s3cret-ü")
    server_first = server.evaluate_response(client.first())
    assert b",i=8192" in server_first
    server_final = server.evaluate_response(client.evaluate(server_first))
    assert client.evaluate(server_final) == b""
    assert server.is_complete and client.is_complete
    assert server.authorization_id == user


def _attempt(server: ScramSaslServer, client: ScramSaslClient) -> Exception:
    with pytest.raises((SaslError, SaslAuthenticationError)) as failure:
        server.evaluate_response(client.evaluate(server.evaluate_response(client.first())))
    return failure.value


def test_wrong_password_and_unknown_user_fail_at_the_same_step() -> None:
    store = {("alice", SHA256): ScramCredential.generate(SHA256, "right", 4096)}
    wrong = _attempt(
        ScramSaslServer(SHA256, _credentials(store)), ScramSaslClient(SHA256, "alice", "wrong")
    )
    unknown = _attempt(
        ScramSaslServer(SHA256, _credentials(store)), ScramSaslClient(SHA256, "bob", "right")
    )
    assert type(wrong) is type(unknown) is SaslError
    # an unknown user gets the same salt at every attempt, as a real user does
    firsts = {
        ScramSaslServer(SHA256, _credentials(store))
        .evaluate_response(ScramSaslClient(SHA256, "bob", "x").first())
        .split(b",s=")[1]
        for _ in range(3)
    }
    assert len(firsts) == 1


def test_a_tampered_proof_or_nonce_fails() -> None:
    store = {("alice", SHA256): ScramCredential.generate(SHA256, "pw", 4096)}
    for tamper in ("proof", "nonce", "short proof"):
        server = ScramSaslServer(SHA256, _credentials(store))
        client = ScramSaslClient(SHA256, "alice", "pw")
        final = ClientFinalMessage.parse(client.evaluate(server.evaluate_response(client.first())))
        if tamper == "proof":
            final = ClientFinalMessage(
                channel_binding=final.channel_binding,
                nonce=final.nonce,
                proof=bytes([final.proof[0] ^ 1]) + final.proof[1:],
            )
        elif tamper == "nonce":
            final = ClientFinalMessage(
                channel_binding=final.channel_binding, nonce=final.nonce + "x", proof=final.proof
            )
        else:
            final = ClientFinalMessage(
                channel_binding=final.channel_binding, nonce=final.nonce, proof=final.proof[:8]
            )
        with pytest.raises(SaslError):
            server.evaluate_response(final.to_bytes())
        with pytest.raises(SaslError):  # FAILED is final
            server.evaluate_response(final.to_bytes())


def test_librdkafka_2_0_final_nonce_with_the_client_nonce_twice_authenticates() -> None:
    """librdkafka before 2.2 (Debian's 2.0.2) answers r=<cnonce><cnonce><snonce>; Kafka's
    ScramSaslServer checks that the nonce ends with the server's, so it authenticates, and so
    must this one (the old equality check refused every such client: 'Invalid client nonce')."""
    store = {("alice", SHA256): ScramCredential.generate(SHA256, "pw", 4096)}
    server = ScramSaslServer(SHA256, _credentials(store))
    client_first = ClientFirstMessage.build("alice", "-./0123456789:;<=>?@ABCDEFGHIJKLMN")
    server_first = ServerFirstMessage.parse(server.evaluate_response(client_first.to_bytes()))
    nonce = client_first.nonce + server_first.nonce
    without_proof = f"c=biws,r={nonce}"
    formatter = ScramFormatter(SHA256)
    salted = formatter.salted_password("pw", server_first.salt, server_first.iterations)
    proof = formatter.client_proof(
        salted, auth_message(client_first.bare, server_first.to_message(), without_proof)
    )
    final = ClientFinalMessage(channel_binding=b"n,,", nonce=nonce, proof=proof)
    assert server.evaluate_response(final.to_bytes()).startswith(b"v=")
    assert server.is_complete and server.authorization_id == "alice"


def test_iterations_bounds() -> None:
    store = {("alice", SHA256): ScramCredential.generate(SHA256, "pw", 4095)}
    server = ScramSaslServer(SHA256, _credentials(store))
    with pytest.raises(SaslError, match="less than the minimum 4096"):
        server.evaluate_response(ScramSaslClient(SHA256, "alice", "pw").first())
    client = ScramSaslClient(SHA256, "alice", "pw", nonce="abc")
    client.first()
    with pytest.raises(SaslError, match="less than the minimum"):
        client.evaluate(b"r=abcdef,s=c2FsdA==,i=4095")
    assert (SHA512.min_iterations, SHA512.max_iterations) == (4096, 16384)


def test_authorization_id_other_than_the_user_is_refused_with_kafka_message() -> None:
    store = {("alice", SHA256): ScramCredential.generate(SHA256, "pw", 4096)}
    server = ScramSaslServer(SHA256, _credentials(store))
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        server.evaluate_response(b"n,a=bob,n=alice,r=abc")


def test_delegation_token_extension_is_refused() -> None:
    store = {("alice", SHA256): ScramCredential.generate(SHA256, "pw", 4096)}
    with pytest.raises(SaslError, match="Token"):
        ScramSaslServer(SHA256, _credentials(store)).evaluate_response(
            b"n,,n=alice,r=abc,tokenauth=true"
        )


def test_credential_text_round_trip_as_kafka_writes_it() -> None:
    credential = ScramCredential.generate(SHA512, "pw", 8192, salt=b"salt")
    text = credential_to_string(credential)
    assert text.startswith("salt=c2FsdA==,stored_key=") and text.endswith(",iterations=8192")
    assert credential_from_string(text) == credential
    for bad in ("salt=c2FsdA==", "salt=!,stored_key=a,server_key=a,iterations=1", "x"):
        with pytest.raises(InvalidScramCredentialError):
            credential_from_string(bad)
    assert "stored" not in repr(credential) and "salt" not in repr(credential)


def test_plain_server_as_kafka() -> None:
    users = {"alice": "alice-secret", "bob": ""}
    ok = PlainSaslServer(users)
    assert ok.evaluate_response(PlainSaslClient("alice", "alice-secret").first()) == b""
    assert ok.is_complete and ok.authorization_id == "alice"
    authz = PlainSaslServer(users)
    authz.evaluate_response(b"alice\0alice\0alice-secret")
    assert authz.authorization_id == "alice"
    cases = {
        b"\0alice\0wrong": "Invalid username or password",
        b"\0nobody\0alice-secret": "Invalid username or password",
        b"bob\0alice\0alice-secret": "authorization id that is different",
        b"\0\0pw": "username not specified",
        b"\0alice\0": "password not specified",
        b"alice\0alice-secret": "expected 3 tokens, got 2",
        b"a\0b\0c\0d\0e": "expected 3 tokens, got 4",
    }
    for token, message in cases.items():
        with pytest.raises(SaslAuthenticationError, match=message):
            PlainSaslServer(users).evaluate_response(token)


def test_jaas_config_parser() -> None:
    entry = parse_jaas_config(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        ' username="admin" password="admin-secret" user_admin="admin-secret"'
        " user_alice='al\\'ice' user_bob=bob-pw;"
    )
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert (entry.username, entry.password) == ("admin", "admin-secret")
    assert entry.plain_users() == {"admin": "admin-secret", "alice": "al'ice", "bob": "bob-pw"}
    assert "secret" not in repr(entry)
    scram = parse_jaas_config(
        "org.apache.kafka.common.security.scram.ScramLoginModule required"
        ' username="b" password="p";'
    )
    assert (scram.username, scram.password) == ("b", "p")
    for bad in (
        'org.Module required username="a"',  # no ';'
        'org.Module username="a";',  # no flag
        'org.Module required username="a;',  # unclosed quote
        "a required; b required;",  # two modules
        "org.Module required password=p#ss;",
    ):
        with pytest.raises(InvalidConfigError) as failure:
            parse_jaas_config(bad)
        assert "p#ss" not in str(failure.value)


def test_sanitizer_as_kafka() -> None:
    principal = "CN=Some characters !@#$%&*()_-+=';:,/~"
    sanitized = sanitize(principal)
    assert all(c.isalnum() or c in "._-%" for c in sanitized)
    assert desanitize(sanitized) == principal
    assert sanitize("a b*c+d") == "a%20b%2Ac%2Bd"
    assert sanitize("alice") == "alice"
