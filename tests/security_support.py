"""Test certificates made with ``cryptography``: a CA, broker and client certificates signed by
it, and the files Kafka's settings point at (PEM key + chain, PEM trust store, PKCS12 store).

    pki = TestPki(tmp_path)                       # a CA in tmp_path/pki
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")   # SAN 127.0.0.1, localhost
    client = pki.issue("alice", "CN=alice,OU=eng,O=acme,C=US")
    broker.pem_keystore        # PKCS#8 key followed by its certificate: ssl.keystore.location
    pki.ca_pem                 # ssl.truststore.location (PEM)
    broker.pkcs12(password)    # a PKCS12 key store

    ssl_listener_props(pki, broker)   # the broker's ssl.* settings for a PEM key store

Subjects are written most specific first, as Java prints them; names are built in certificate
order (C first). The certificates are built by the product's own generator
(embedded/certificates.py, which makes the demo's and the Compose file's); only the files
around them (PKCS12, encrypted keys, expired certificates) are the tests' own. Everything
lands in the given directory; nothing is shared between tests.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12

from embedded.certificates import build_ca_certificate, build_certificate, name_of

__all__ = ["Issued", "TestPki", "name_of", "ssl_listener_props"]


@dataclass(frozen=True, slots=True)
class Issued:
    """A key and certificate signed by the test CA, with its files."""

    name: str
    directory: Path
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    ca_certificate: x509.Certificate

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def chain_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def pem_keystore(self) -> Path:
        """Key (PKCS#8) and certificate in one file: ``ssl.keystore.type=PEM``."""
        path = self.directory / f"{self.name}.keystore.pem"
        if not path.exists():
            path.write_bytes(self.key_pem + self.chain_pem)
        return path

    @property
    def key_file(self) -> Path:
        path = self.directory / f"{self.name}.key.pem"
        if not path.exists():
            path.write_bytes(self.key_pem)
        return path

    @property
    def cert_file(self) -> Path:
        path = self.directory / f"{self.name}.cert.pem"
        if not path.exists():
            path.write_bytes(self.chain_pem)
        return path

    def encrypted_key_pem(self, password: str) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password.encode()),
        )

    def pkcs12(self, password: str) -> Path:
        path = self.directory / f"{self.name}.keystore.p12"
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                self.name.encode(),
                self.key,
                self.certificate,
                [self.ca_certificate],
                serialization.BestAvailableEncryption(password.encode()),
            )
        )
        return path


class TestPki:
    """A certificate authority in ``directory / "pki"``."""

    __test__ = False  # not a test class

    def __init__(self, directory: Path, *, ca_dn: str = "CN=test-ca,O=storage-core") -> None:
        self.directory = directory / "pki"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca_certificate = build_ca_certificate(self.ca_key, ca_dn, valid_days=30)

    @property
    def ca_pem(self) -> Path:
        """The CA certificate: a PEM trust store (``ssl.truststore.location``)."""
        path = self.directory / "ca.pem"
        if not path.exists():
            path.write_bytes(self.ca_certificate.public_bytes(serialization.Encoding.PEM))
        return path

    def ca_pkcs12(self, password: str) -> Path:
        """The CA certificate in a PKCS12 trust store."""
        path = self.directory / "ca.truststore.p12"
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                None,
                None,
                None,
                [self.ca_certificate],
                serialization.BestAvailableEncryption(password.encode()),
            )
        )
        return path

    def issue(
        self,
        name: str,
        dn: str,
        *,
        hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
        expired: bool = False,
    ) -> Issued:
        """A certificate for ``dn`` usable as server and client, with ``hosts`` as SANs."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = (
            (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
            if expired
            else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=10))
        )
        certificate = build_certificate(
            ca_key=self.ca_key,
            ca_certificate=self.ca_certificate,
            key=key,
            dn=dn,
            hosts=hosts,
            not_before=start,
            not_after=end,
        )
        return Issued(name, self.directory, key, certificate, self.ca_certificate)


def ssl_listener_props(
    pki: TestPki, broker: Issued, *, prefix: str = "", client_auth: str = "none"
) -> dict[str, str]:
    """A broker's TLS settings with a PEM key store and trust store (``prefix``:
    ``listener.name.<l>.`` for one listener's own)."""
    return {
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(broker.pem_keystore),
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.truststore.location": str(pki.ca_pem),
        f"{prefix}ssl.client.auth": client_auth,
    }
