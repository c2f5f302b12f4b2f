"""embedded/certificates.py: the CA and certificates of the demo and the Compose file are what a
TLS client checks (the CA signs, the SANs name the hosts), keys are private, and a directory
that holds them keeps them."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest

from embedded.certificates import CertificateAuthority, CertificateError, main


def _handshake(server_keystore: Path, ca: Path, host: str) -> str:
    """A TLS handshake on loopback: the server presents ``server_keystore``, the client
    trusts ``ca`` and checks ``host``; returns the protocol agreed."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(server_keystore)
    client_context = ssl.create_default_context(cafile=str(ca))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                client_context.wrap_socket(raw, server_hostname=host) as tls,
            ):
                version = tls.version() or ""
                tls.sendall(b"x")
        finally:
            thread.join(5)
    return version


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_broker_certificate_passes_a_clients_hostname_check(tmp_path: Path, host: str) -> None:
    ca = CertificateAuthority(tmp_path / "certs")
    broker = ca.issue_broker("broker-1")
    assert _handshake(broker.keystore_pem, ca.ca_pem, host).startswith("TLS")


def test_a_name_not_among_the_sans_is_refused(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "certs")
    broker = ca.issue_broker("broker-1", hosts=("broker-1",))
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        _handshake(broker.keystore_pem, ca.ca_pem, "127.0.0.1")


def test_another_ca_is_not_trusted(tmp_path: Path) -> None:
    broker = CertificateAuthority(tmp_path / "one").issue_broker("broker-1")
    other = CertificateAuthority(tmp_path / "two")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(broker.keystore_pem, other.ca_pem, "127.0.0.1")


def test_keys_are_private_and_kept_on_the_next_use(tmp_path: Path) -> None:
    directory = tmp_path / "certs"
    ca = CertificateAuthority(directory)
    first = ca.issue_broker("broker-1")
    client = ca.issue_client("admin")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in (directory / "ca.key.pem", first.keystore_pem, first.key_pem, client.key_pem):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    keystore = first.keystore_pem.read_bytes()
    ca_pem = ca.ca_pem.read_bytes()

    again = CertificateAuthority(directory)
    assert again.ca_pem.read_bytes() == ca_pem
    assert again.issue_broker("broker-1").keystore_pem.read_bytes() == keystore
    # other hosts: a new certificate from the same CA
    moved = again.issue_broker("broker-1", hosts=("broker-1", "localhost"))
    assert moved.keystore_pem.read_bytes() != keystore
    assert _handshake(moved.keystore_pem, ca.ca_pem, "localhost").startswith("TLS")


def test_a_name_that_would_leave_the_directory_is_refused(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "certs")
    with pytest.raises(CertificateError, match=r"certificate name '\.\./x'"):
        ca.issue_broker("../x")


def test_the_command_issues_what_it_is_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "certs"
    code = main(
        [
            "--dir",
            str(directory),
            "--broker",
            "broker-1",
            "--hosts",
            "broker-1,localhost",
            "--broker",
            "broker-2",
            "--hosts",
            "broker-2,localhost",
            "--client",
            "admin",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "CN=broker-2,OU=brokers,O=storage-core" in out
    assert "CN=admin,OU=clients,O=storage-core" in out
    keystore = directory / "broker-2.keystore.pem"
    assert _handshake(keystore, directory / "ca.pem", "localhost").startswith("TLS")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(keystore, directory / "ca.pem", "broker-1")
