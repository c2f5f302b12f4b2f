"""Certificates for a secured cluster, made with ``cryptography``: a CA, and keys and
certificates signed by it for brokers (server and client use, with the hosts as SANs) and for
clients, written as the files Kafka's PEM settings point at.

    <dir>/ca.pem                    the CA certificate: ssl.truststore.location, ssl.ca.location
    <dir>/ca.key.pem                the CA's key (0600): signs the certificates issued later
    <dir>/<name>.keystore.pem       PKCS#8 key followed by its certificate (0600):
                                    ssl.keystore.type=PEM, ssl.keystore.location
    <dir>/<name>.cert.pem           the certificate alone (librdkafka's ssl.certificate.location)

Made on first use: a directory that holds a CA keeps it, and a name already issued keeps its
key and certificate while they are valid for another ``RENEW_BEFORE_DAYS`` and name the same
hosts, so a cluster restarted on its directory (``make airflow-ui`` after ``make demo``) keeps
its trust. The directory is 0700; keys are never written other than 0600.

    python -m embedded.certificates --dir certs --broker broker-1 --hosts broker-1,localhost \\
        --broker broker-2 --hosts broker-2,localhost --client admin

(the Compose file's one-shot ``certificates`` service). Subjects are written most specific
first, as Java prints them (``CN=broker-1,OU=brokers,O=storage-core``).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DN = "CN=storage-core-ca,O=storage-core"
BROKER_OU = "brokers"
CLIENT_OU = "clients"
ORGANIZATION = "storage-core"
CA_VALID_DAYS = 3650
VALID_DAYS = 825
RENEW_BEFORE_DAYS = 30
DEFAULT_HOSTS = ("127.0.0.1", "localhost")
MAX_HOSTS = 32
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_ATTRIBUTES = {
    "CN": NameOID.COMMON_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "C": NameOID.COUNTRY_NAME,
}


class CertificateError(ValueError):
    """A name or host that cannot go into a certificate, or a CA directory that cannot be
    used; the message says which and what to do."""


def name_of(dn: str) -> x509.Name:
    """``CN=alice,OU=eng,O=acme,C=US`` (most specific first; ``\\,`` and ``\\+`` escaped) as
    an X.509 name."""
    parts = [p.split("=", 1) for p in re.split(r"(?<!\\),", dn)]
    return x509.Name(
        [
            x509.NameAttribute(_ATTRIBUTES[k.strip()], re.sub(r"\\(.)", r"\1", v))
            for k, v in reversed(parts)
        ]
    )


def build_ca_certificate(
    key: ec.EllipticCurvePrivateKey, dn: str, *, valid_days: int = CA_VALID_DAYS
) -> x509.Certificate:
    """A self-signed CA certificate for ``key``."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name_of(dn))
        .issuer_name(name_of(dn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )


def build_certificate(
    *,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_certificate: x509.Certificate,
    key: ec.EllipticCurvePrivateKey,
    dn: str,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> x509.Certificate:
    """A certificate for ``dn`` usable as TLS server and client, ``hosts`` (IP addresses or
    DNS names) as its subject alternative names, signed by the CA."""
    now = datetime.datetime.now(datetime.UTC)
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    builder = (
        x509.CertificateBuilder()
        .subject_name(name_of(dn))
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - datetime.timedelta(days=1))
        .not_valid_after(not_after or now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The key as unencrypted PKCS#8 PEM (the file holding it must be 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def certificate_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def write_private_bytes(path: Path, data: bytes) -> None:
    """``data`` to ``path``, readable by its owner only from creation on (a key)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True, kw_only=True)
class IssuedCertificate:
    """The files of one issued key and certificate."""

    name: str
    dn: str
    keystore_pem: Path
    """Key and certificate: ``ssl.keystore.location`` with ``ssl.keystore.type=PEM``."""
    cert_pem: Path
    key_pem: Path


class CertificateAuthority:
    """The CA of ``directory`` (made on first use) and the certificates it issues there.

    Not thread-safe: one process issues into a directory at a time (the demo, or the
    Compose file's one-shot service before the brokers start)."""

    def __init__(self, directory: Path, *, ca_dn: str = CA_DN) -> None:
        self.directory = directory.resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        self.ca_pem = self.directory / "ca.pem"
        self._ca_key_path = self.directory / "ca.key.pem"
        if self.ca_pem.exists() and self._ca_key_path.exists():
            try:
                key = serialization.load_pem_private_key(
                    self._ca_key_path.read_bytes(), password=None
                )
                self.ca_certificate = x509.load_pem_x509_certificate(self.ca_pem.read_bytes())
            except ValueError:
                raise CertificateError(
                    f"{self.directory} holds a CA that cannot be read: remove ca.pem and"
                    " ca.key.pem there to make a new one (every certificate is then issued again)"
                ) from None
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise CertificateError(f"{self._ca_key_path} is not an EC key: remove it")
            self.ca_key = key
        else:
            self.ca_key = ec.generate_private_key(ec.SECP256R1())
            self.ca_certificate = build_ca_certificate(self.ca_key, ca_dn)
            write_private_bytes(self._ca_key_path, key_pem(self.ca_key))
            self.ca_pem.write_bytes(certificate_pem(self.ca_certificate))

    def issue(
        self, name: str, dn: str, *, hosts: Sequence[str] = DEFAULT_HOSTS
    ) -> IssuedCertificate:
        """The key and certificate ``name`` for ``dn``; kept from an earlier call while valid
        for another ``RENEW_BEFORE_DAYS``, signed by this CA and naming the same hosts."""
        if not _NAME.match(name):
            raise CertificateError(
                f"certificate name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)"
            )
        if not 0 < len(hosts) <= MAX_HOSTS:
            raise CertificateError(f"{name}: give 1 to {MAX_HOSTS} hosts, not {len(hosts)}")
        issued = IssuedCertificate(
            name=name,
            dn=dn,
            keystore_pem=self.directory / f"{name}.keystore.pem",
            cert_pem=self.directory / f"{name}.cert.pem",
            key_pem=self.directory / f"{name}.key.pem",
        )
        if self._still_good(issued, hosts):
            return issued
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = build_certificate(
            ca_key=self.ca_key, ca_certificate=self.ca_certificate, key=key, dn=dn, hosts=hosts
        )
        write_private_bytes(issued.key_pem, key_pem(key))
        write_private_bytes(issued.keystore_pem, key_pem(key) + certificate_pem(certificate))
        issued.cert_pem.write_bytes(certificate_pem(certificate))
        return issued

    def issue_broker(self, name: str, *, hosts: Sequence[str] = DEFAULT_HOSTS) -> IssuedCertificate:
        return self.issue(name, f"CN={name},OU={BROKER_OU},O={ORGANIZATION}", hosts=hosts)

    def issue_client(self, name: str) -> IssuedCertificate:
        return self.issue(name, f"CN={name},OU={CLIENT_OU},O={ORGANIZATION}", hosts=("localhost",))

    def _still_good(self, issued: IssuedCertificate, hosts: Sequence[str]) -> bool:
        if not (issued.keystore_pem.exists() and issued.cert_pem.exists()):
            return False
        try:
            certificate = x509.load_pem_x509_certificate(issued.cert_pem.read_bytes())
            sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        except (ValueError, x509.ExtensionNotFound):
            return False
        named = {str(v) for v in sans.value.get_values_for_type(x509.IPAddress)}
        named |= set(sans.value.get_values_for_type(x509.DNSName))
        renew_at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=RENEW_BEFORE_DAYS)
        return (
            certificate.issuer == self.ca_certificate.subject
            and certificate.subject == name_of(issued.dn)
            and certificate.not_valid_after_utc > renew_at
            and named == set(hosts)
        )


def ssl_principal_mapping_rules() -> str:
    """``ssl.principal.mapping.rules`` that name a certificate of this CA by its CN
    (``CN=broker-1,OU=brokers,O=storage-core`` is ``User:broker-1``), others by their DN."""
    return f"RULE:^CN=([^,]+),OU=(?:{BROKER_OU}|{CLIENT_OU}),O={ORGANIZATION}$/$1/,DEFAULT"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m embedded.certificates",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dir", type=Path, required=True, help="where the CA and files go")
    parser.add_argument(
        "--broker",
        action="append",
        default=[],
        metavar="NAME",
        help="a broker certificate (repeatable)",
    )
    parser.add_argument(
        "--hosts",
        action="append",
        default=[],
        metavar="H1,H2",
        help="the SANs of the n-th --broker, comma-separated (default 127.0.0.1,localhost)",
    )
    parser.add_argument(
        "--client", action="append", default=[], metavar="NAME", help="a client certificate"
    )
    args = parser.parse_args(argv)
    if len(args.hosts) > len(args.broker):
        parser.error("more --hosts than --broker: the n-th --hosts belongs to the n-th --broker")
    hosts = [tuple(h.split(",")) for h in args.hosts]
    hosts += [DEFAULT_HOSTS] * (len(args.broker) - len(hosts))
    try:
        ca = CertificateAuthority(args.dir)
        issued = [ca.issue_broker(n, hosts=h) for n, h in zip(args.broker, hosts, strict=True)]
        issued += [ca.issue_client(n) for n in args.client]
    except (CertificateError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"CA: {ca.ca_pem}")
    for one in issued:
        print(f"{one.dn}: {one.keystore_pem}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
