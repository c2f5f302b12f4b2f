"""TLS contexts from Kafka's ssl.* settings (DefaultSslEngineFactory's stores and checks): each
kind of key and trust store is checked by a real handshake on loopback; bad settings are
refused naming the setting and never its secret; key material written for ``ssl`` is private
and gone once loaded."""

from __future__ import annotations

import re
import socket
import ssl
import tempfile
import threading
from pathlib import Path

import pytest

from storage_core.security.client_transport import (
    ClientSecurityConfig,
    TlsHandshakeError,
    open_socket,
)
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.security.ssl_factory import (
    SslConfigError,
    SslEngineConfig,
    SslMode,
    create_ssl_context,
)
from tests.security_support import Issued, TestPki

SECRET = "Secret-Pw-1234"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return TestPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(pki: TestPki) -> Issued:
    return pki.issue("broker", "CN=localhost,OU=brokers,O=test")


def server_context(settings: dict[str, str]) -> ssl.SSLContext:
    return create_ssl_context(
        SslEngineConfig(values=settings, where="listener SSL"), SslMode.SERVER
    )


def handshake(server: ssl.SSLContext, client: ClientSecurityConfig) -> str:
    """A TLS handshake between ``server`` and ``client`` on loopback; the TLS version used."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    errors: list[BaseException] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as error:
            errors.append(error)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        sock = open_socket("127.0.0.1", port, client, timeout_s=5)
        version = sock.version() if isinstance(sock, ssl.SSLSocket) else None
        sock.sendall(b"x")
        sock.close()
    finally:
        thread.join(5)
        listener.close()
    return str(version)


def tls_client(pki: TestPki, **extra: str) -> ClientSecurityConfig:
    return ClientSecurityConfig(
        security_protocol=SecurityProtocol.SSL,
        settings={
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
            **extra,
        },
    )


def test_pem_keystore_file(pki: TestPki, broker: Issued) -> None:
    server = server_context(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker.pem_keystore)}
    )
    assert handshake(server, tls_client(pki)) == "TLSv1.3"


def test_inline_pem_key_with_its_password_and_inline_trust(pki: TestPki, broker: Issued) -> None:
    server = server_context(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": broker.encrypted_key_pem(SECRET).decode(),
            "ssl.keystore.certificate.chain": broker.chain_pem.decode(),
            "ssl.key.password": SECRET,
        }
    )
    client = ClientSecurityConfig(
        security_protocol=SecurityProtocol.SSL,
        settings={
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": pki.ca_pem.read_text(),
        },
    )
    assert handshake(server, client) == "TLSv1.3"


def test_pkcs12_keystore_and_truststore(pki: TestPki, broker: Issued) -> None:
    server = server_context(
        {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(broker.pkcs12(SECRET)),
            "ssl.keystore.password": SECRET,
        }
    )
    client = ClientSecurityConfig(
        security_protocol=SecurityProtocol.SSL,
        settings={
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(pki.ca_pkcs12(SECRET)),
            "ssl.truststore.password": SECRET,
        },
    )
    assert handshake(server, client) == "TLSv1.3"


def test_enabled_protocols_and_ssl_protocol_bound_the_version(pki: TestPki, broker: Issued) -> None:
    keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker.pem_keystore)}
    only_12 = server_context({**keystore, "ssl.enabled.protocols": "TLSv1.2"})
    assert handshake(only_12, tls_client(pki)) == "TLSv1.2"
    capped = server_context({**keystore, "ssl.protocol": "TLSv1.2"})
    assert handshake(capped, tls_client(pki)) == "TLSv1.2"
    suites = server_context(
        {**keystore, "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
    )
    assert handshake(suites, tls_client(pki)) == "TLSv1.2"


def test_a_wrong_pkcs12_password_names_the_setting_not_the_password(
    pki: TestPki, broker: Issued
) -> None:
    store = broker.pkcs12(SECRET)
    with pytest.raises(SslConfigError) as refused:
        server_context(
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(store),
                "ssl.keystore.password": "Wrong-Pw-987",
            }
        )
    assert "ssl.keystore.password" in str(refused.value)
    assert str(store) in str(refused.value)
    assert "Wrong-Pw-987" not in str(refused.value)
    assert SECRET not in str(refused.value)


def test_a_wrong_key_password_names_the_setting(broker: Issued) -> None:
    with pytest.raises(SslConfigError, match=r"ssl\.key\.password") as refused:
        server_context(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.key": broker.encrypted_key_pem(SECRET).decode(),
                "ssl.keystore.certificate.chain": broker.chain_pem.decode(),
                "ssl.key.password": "Wrong-Pw-987",
            }
        )
    assert "Wrong-Pw-987" not in str(refused.value)
    assert "PRIVATE KEY" not in str(refused.value)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"ssl.keystore.location": "/etc/kafka/broker.jks"}, "ssl.keystore.type=JKS"),
        ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/x"}, "ssl.keystore.type=JKS"),
        ({"ssl.keystore.type": "PEM"}, "needs a key store"),
        (
            {"ssl.keystore.type": "PEM", "ssl.keystore.key": "k"},
            "certificate chain is not specified",
        ),
        (
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": "/x",
                "ssl.keystore.password": "p",
            },
            "cannot be specified with PEM",
        ),
        (
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": "/nonexistent",
                "ssl.keystore.password": SECRET,
            },
            "cannot read ssl.keystore.location=/nonexistent",
        ),
        (
            {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/x"},
            "key store password (ssl.keystore.password) is not specified",
        ),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "only TLSv1.2 and TLSv1.3"),
        ({"ssl.cipher.suites": "TLS_RSA_WITH_RC4_128_MD5"}, "TLS_RSA_WITH_RC4_128_MD5"),
        ({"ssl.client.auth": "always"}, "ssl.client.auth"),
        ({"ssl.truststore.location": "/etc/kafka/trust.jks"}, "ssl.truststore.type=JKS"),
    ],
)
def test_bad_settings_are_refused_naming_them(
    broker: Issued, settings: dict[str, str], named: str
) -> None:
    keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker.pem_keystore)}
    if any(k.startswith("ssl.keystore") for k in settings):
        keystore = {}
    with pytest.raises(SslConfigError, match=re.escape(named)):
        server_context({**keystore, **settings})


def test_key_material_written_for_ssl_is_private_and_removed(
    broker: Issued, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    modes: list[int] = []
    original = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, *args: object, **kwargs: object) -> None:
        path = Path(certfile)
        modes.append(path.stat().st_mode & 0o777)
        modes.append(path.parent.stat().st_mode & 0o777)
        assert SECRET.encode() not in path.read_bytes()
        assert b"BEGIN ENCRYPTED PRIVATE KEY" in path.read_bytes()
        original(self, certfile, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    server_context(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": broker.key_pem.decode(),
            "ssl.keystore.certificate.chain": broker.chain_pem.decode(),
        }
    )
    assert modes == [0o600, 0o700]
    assert list(tmp_path.iterdir()) == []


def test_an_untrusted_server_certificate_fails_the_client_naming_the_trust_store(
    tmp_path: Path, broker: Issued
) -> None:
    stranger = TestPki(tmp_path / "other", ca_dn="CN=other-ca")
    server = server_context(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker.pem_keystore)}
    )
    with pytest.raises(TlsHandshakeError, match=r"ssl\.truststore"):
        handshake(server, tls_client(stranger))


def test_the_server_name_is_checked_unless_identification_is_off(
    pki: TestPki,
) -> None:
    elsewhere = pki.issue("elsewhere", "CN=kafka.example", hosts=("kafka.example",))
    server = server_context(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(elsewhere.pem_keystore)}
    )
    with pytest.raises(TlsHandshakeError, match=r"127\.0\.0\.1"):
        handshake(server, tls_client(pki))
    assert handshake(
        server, tls_client(pki, **{"ssl.endpoint.identification.algorithm": ""})
    ).startswith("TLSv1")
