"""TLS contexts from Kafka's ``ssl.*`` settings (Kafka's ``DefaultSslEngineFactory``), for the
broker's TLS listeners (server side) and for its own connections and clients (client side).

Settings (Kafka's names, defaults and checks):

    ssl.protocol                      TLSv1.3   the highest version (TLSv1.2 caps it at 1.2)
    ssl.enabled.protocols             TLSv1.2,TLSv1.3
    ssl.cipher.suites                 (OpenSSL's)  IANA names, as Java takes them
    ssl.keystore.type                 JKS       PEM or PKCS12; JKS is refused, naming it
    ssl.keystore.location                       PEM: private key (PKCS#8) and certificate chain
                                                in one file; PKCS12: the store
    ssl.keystore.password                       PKCS12 only (Kafka refuses it with PEM)
    ssl.key.password                            an encrypted PEM key's password
    ssl.keystore.key                            PEM inline: the key ...
    ssl.keystore.certificate.chain              ... and its chain (KIP-651)
    ssl.truststore.type               JKS       PEM or PKCS12
    ssl.truststore.location / .password / ssl.truststore.certificates (PEM inline)
    ssl.client.auth                   none      server side: none, requested, required
    ssl.endpoint.identification.algorithm  https  client side: the server's name is checked;
                                                empty: not

No truststore: the system's CAs (Java's cacerts). Python's ``ssl`` loads keys and chains from
files only: inline PEM and PKCS12 material is written to a private temporary directory (0700),
the key encrypted with a one-time password, the file 0600, and removed once loaded. No
password, key or certificate text ever reaches an error message or a log line.

Thread-safety: a built ``ssl.SSLContext`` is shared by every connection of its listener.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from storage_core.errors import InvalidConfigError

PEM_TYPE = "PEM"
PKCS12_TYPE = "PKCS12"
JKS_TYPE = "JKS"
DEFAULT_STORE_TYPE = JKS_TYPE
DEFAULT_SSL_PROTOCOL = "TLSv1.3"
DEFAULT_ENABLED_PROTOCOLS = "TLSv1.2,TLSv1.3"
MAX_STORE_BYTES = 10 * 1024 * 1024

SECRET_SETTINGS = frozenset(
    {
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.password",
        "ssl.keystore.key",
    }
)
"""Settings whose values never appear in a message."""

_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_TLS13_SUITES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)
# IANA (Java) names of the TLS 1.2 suites OpenSSL offers, and OpenSSL's names for them
_TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
}


class SslConfigError(InvalidConfigError):
    """A TLS setting that cannot be used; the message names the setting, never its secret."""


class SslClientAuth(Enum):
    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"

    @staticmethod
    def for_name(text: str) -> SslClientAuth:
        try:
            return SslClientAuth(text.strip().lower() or "none")
        except ValueError:
            raise SslConfigError(
                f"Invalid value {text!r} for configuration ssl.client.auth: expected none,"
                " requested or required"
            ) from None


class SslMode(Enum):
    SERVER = "server"
    CLIENT = "client"


@dataclass(frozen=True, slots=True, kw_only=True)
class SslEngineConfig:
    """The ``ssl.*`` settings that apply (a listener's, its ``listener.name.<l>.`` overrides
    already applied; or a client's). ``where`` names them in errors (``listener SSL``)."""

    values: Mapping[str, str]
    where: str = ""

    def get(self, name: str) -> str | None:
        value = self.values.get(name)
        return value if value is not None and value.strip() != "" else None

    @property
    def client_auth(self) -> SslClientAuth:
        return SslClientAuth.for_name(self.get("ssl.client.auth") or "none")

    @property
    def endpoint_identification(self) -> bool:
        value = self.values.get("ssl.endpoint.identification.algorithm")
        return (value if value is not None else "https").strip().lower() == "https"

    def error(self, message: str) -> SslConfigError:
        return SslConfigError(f"{self.where}: {message}" if self.where else message)


def create_ssl_context(config: SslEngineConfig, mode: SslMode) -> ssl.SSLContext:
    """A TLS context for ``mode`` from ``config``; ``SslConfigError`` naming what is wrong."""
    server = mode is SslMode.SERVER
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    _set_protocols(context, config)
    _set_cipher_suites(context, config)
    _load_keystore(context, config, required=server)
    _load_truststore(context, config)
    if server:
        context.verify_mode = {
            SslClientAuth.NONE: ssl.CERT_NONE,
            SslClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
            SslClientAuth.REQUIRED: ssl.CERT_REQUIRED,
        }[config.client_auth]
    else:
        context.check_hostname = config.endpoint_identification
        context.verify_mode = ssl.CERT_REQUIRED
    return context


# ---------------------------------------------------------------------------- protocols, suites
def _set_protocols(context: ssl.SSLContext, config: SslEngineConfig) -> None:
    enabled_text = config.get("ssl.enabled.protocols") or DEFAULT_ENABLED_PROTOCOLS
    enabled = [p.strip() for p in enabled_text.split(",") if p.strip()]
    unknown = [p for p in enabled if p not in _TLS_VERSIONS]
    if unknown or not enabled:
        raise config.error(
            f"ssl.enabled.protocols={enabled_text} names {', '.join(unknown) or 'nothing'}:"
            " only TLSv1.2 and TLSv1.3 are supported"
        )
    protocol = config.get("ssl.protocol") or DEFAULT_SSL_PROTOCOL
    if protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
        raise config.error(f"ssl.protocol={protocol} is not supported: use TLSv1.3 or TLSv1.2")
    versions = sorted(_TLS_VERSIONS[p] for p in enabled)
    highest = versions[-1]
    if protocol == "TLSv1.2":  # Java's SSLContext of TLSv1.2 never offers 1.3
        highest = ssl.TLSVersion.TLSv1_2
    if highest < versions[0]:
        raise config.error(
            f"ssl.protocol={protocol} allows no version of ssl.enabled.protocols={enabled_text}"
        )
    context.minimum_version = versions[0]
    context.maximum_version = highest


def _set_cipher_suites(context: ssl.SSLContext, config: SslEngineConfig) -> None:
    text = config.get("ssl.cipher.suites")
    if text is None:
        return
    suites = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in suites if s not in _TLS12_SUITES and s not in _TLS13_SUITES]
    if unknown:
        raise config.error(
            f"ssl.cipher.suites names {', '.join(unknown)}, which this broker cannot offer;"
            f" choose among {', '.join(sorted(_TLS12_SUITES) + sorted(_TLS13_SUITES))}"
        )
    tls12 = [_TLS12_SUITES[s] for s in suites if s in _TLS12_SUITES]
    tls13 = {s for s in suites if s in _TLS13_SUITES}
    if tls12:
        context.set_ciphers(":".join(tls12))
    elif context.minimum_version <= ssl.TLSVersion.TLSv1_2:
        context.minimum_version = ssl.TLSVersion.TLSv1_3  # no TLS 1.2 suite: no TLS 1.2
    if not tls13:
        if context.minimum_version >= ssl.TLSVersion.TLSv1_3:
            raise config.error("ssl.cipher.suites leaves no suite for the enabled protocols")
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    elif tls13 != _TLS13_SUITES:
        raise config.error(
            "ssl.cipher.suites names some TLS 1.3 suites but not all: Python's ssl offers every"
            f" TLS 1.3 suite or none; list all of {', '.join(sorted(_TLS13_SUITES))} or none"
        )


# ---------------------------------------------------------------------------- key store
def _load_keystore(context: ssl.SSLContext, config: SslEngineConfig, *, required: bool) -> None:
    store_type = (config.get("ssl.keystore.type") or DEFAULT_STORE_TYPE).upper()
    location = config.get("ssl.keystore.location")
    password = config.get("ssl.keystore.password")
    key_password = config.get("ssl.key.password")
    key = config.get("ssl.keystore.key")
    chain = config.get("ssl.keystore.certificate.chain")
    if key is not None:
        if store_type != PEM_TYPE:
            raise config.error(
                "SSL private key (ssl.keystore.key) can be specified only for PEM, but key store"
                f" type is {store_type}."
            )
        if chain is None:
            raise config.error(
                "SSL private key is specified, but certificate chain is not specified"
                " (ssl.keystore.certificate.chain)."
            )
        if location is not None:
            raise config.error(
                "Both SSL key store location (ssl.keystore.location) and separate private key"
                " (ssl.keystore.key) are specified."
            )
        if password is not None:
            raise config.error(
                "SSL key store password (ssl.keystore.password) cannot be specified with PEM"
                " format, only key password (ssl.key.password) may be specified."
            )
        _load_pem_key_and_chain(context, config, key.encode(), chain.encode(), key_password)
        return
    if chain is not None:
        raise config.error(
            "SSL certificate chain is specified, but private key is not specified"
            " (ssl.keystore.key)"
        )
    if location is None:
        if password is not None:
            raise config.error(
                "SSL key store is not specified (ssl.keystore.location), but key store password"
                " is specified."
            )
        if required:
            raise config.error(
                "an SSL listener needs a key store: set ssl.keystore.location (PEM or PKCS12),"
                " or ssl.keystore.key and ssl.keystore.certificate.chain"
            )
        return
    _refuse_jks(config, "ssl.keystore.type", store_type)
    if store_type == PEM_TYPE:
        if password is not None:
            raise config.error(
                "SSL key store password (ssl.keystore.password) cannot be specified with PEM"
                " format, only key password (ssl.key.password) may be specified"
            )
        data = _read_store(config, "ssl.keystore.location", location)
        _load_pem_key_and_chain(context, config, data, data, key_password)
        return
    if store_type != PKCS12_TYPE:
        raise config.error(f"ssl.keystore.type={store_type} is not supported: use PEM or PKCS12")
    if password is None:
        raise config.error(
            "SSL key store is specified (ssl.keystore.location), but key store password"
            " (ssl.keystore.password) is not specified."
        )
    data = _read_store(config, "ssl.keystore.location", location)
    try:
        private_key, certificate, extra = pkcs12.load_key_and_certificates(data, password.encode())
    except (ValueError, TypeError):
        raise config.error(
            f"Failed to load SSL keystore {location} of type PKCS12: wrong"
            " ssl.keystore.password, or not a PKCS12 file"
        ) from None
    if private_key is None or certificate is None:
        raise config.error(
            f"SSL keystore {location} (PKCS12) holds no private key with its certificate"
        )
    chain_pem = b"".join(
        c.public_bytes(serialization.Encoding.PEM) for c in [certificate, *(extra or [])]
    )
    key_pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _load_pem_key_and_chain(context, config, key_pem, chain_pem, None)


def _load_pem_key_and_chain(
    context: ssl.SSLContext,
    config: SslEngineConfig,
    key_pem: bytes,
    chain_pem: bytes,
    key_password: str | None,
) -> None:
    """Load a PEM key (PKCS#8, maybe encrypted with ``key_password``) and chain; both go
    through one 0600 temporary file, the key re-encrypted with a one-time password."""
    try:
        private_key = serialization.load_pem_private_key(
            _pem_blocks(key_pem, "PRIVATE KEY"),
            key_password.encode() if key_password is not None else None,
        )
    except (ValueError, TypeError):
        raise config.error(
            "Private key could not be loaded: not a PKCS#8 PEM key, or ssl.key.password is wrong"
            " (or missing for an encrypted key)"
        ) from None
    certificates = _pem_blocks(chain_pem, "CERTIFICATE")
    if not certificates:
        raise config.error("At least one certificate expected, but none found (key store)")
    one_time = secrets.token_bytes(32)
    encrypted = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time),
    )
    with _private_file(encrypted + certificates) as path:
        try:
            context.load_cert_chain(str(path), password=one_time)
        except ssl.SSLError as error:
            raise config.error(
                f"the key store's private key does not fit its certificate: {error.reason}"
            ) from None


def _pem_blocks(data: bytes, kind: str) -> bytes:
    """The PEM blocks of ``data`` whose label ends with ``kind`` (``ENCRYPTED PRIVATE KEY``
    and ``PRIVATE KEY`` for keys), concatenated."""
    out = []
    marker = b"-----BEGIN "
    start = data.find(marker)
    while start >= 0:
        label_end = data.find(b"-----", start + len(marker))
        if label_end < 0:
            break
        label = data[start + len(marker) : label_end]
        end_marker = b"-----END " + label + b"-----"
        end = data.find(end_marker, label_end)
        if end < 0:
            break
        end += len(end_marker)
        if label.endswith(kind.encode()):
            out.append(data[start:end] + b"\n")
        start = data.find(marker, end)
    return b"".join(out)


# ---------------------------------------------------------------------------- trust store
def _load_truststore(context: ssl.SSLContext, config: SslEngineConfig) -> None:
    store_type = (config.get("ssl.truststore.type") or DEFAULT_STORE_TYPE).upper()
    location = config.get("ssl.truststore.location")
    password = config.get("ssl.truststore.password")
    certificates = config.get("ssl.truststore.certificates")
    if certificates is not None:
        if store_type != PEM_TYPE:
            raise config.error(
                "SSL trust store certs (ssl.truststore.certificates) can be specified only for"
                f" PEM, but trust store type is {store_type}."
            )
        if location is not None:
            raise config.error(
                "Both SSL trust store location (ssl.truststore.location) and separate trust"
                " certificates (ssl.truststore.certificates) are specified."
            )
        if password is not None:
            raise config.error(
                "SSL trust store password cannot be specified for PEM format"
                " (ssl.truststore.password)."
            )
        _load_ca_pem(context, config, certificates.encode())
        return
    if location is None:
        if password is not None:
            raise config.error(
                "SSL trust store is not specified (ssl.truststore.location), but trust store"
                " password is specified."
            )
        context.load_default_certs(
            ssl.Purpose.CLIENT_AUTH
            if context.protocol == ssl.PROTOCOL_TLS_SERVER
            else ssl.Purpose.SERVER_AUTH
        )
        return
    _refuse_jks(config, "ssl.truststore.type", store_type)
    if store_type == PEM_TYPE:
        if password is not None:
            raise config.error(
                "SSL trust store password cannot be specified for PEM format"
                " (ssl.truststore.password)."
            )
        _load_ca_pem(context, config, _read_store(config, "ssl.truststore.location", location))
        return
    if store_type != PKCS12_TYPE:
        raise config.error(f"ssl.truststore.type={store_type} is not supported: use PEM or PKCS12")
    data = _read_store(config, "ssl.truststore.location", location)
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except (ValueError, TypeError):
        raise config.error(
            f"Failed to load SSL truststore {location} of type PKCS12: wrong"
            " ssl.truststore.password, or not a PKCS12 file"
        ) from None
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    _load_ca_pem(
        context, config, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    )


def _load_ca_pem(context: ssl.SSLContext, config: SslEngineConfig, data: bytes) -> None:
    blocks = _pem_blocks(data, "CERTIFICATE")
    if not blocks:
        raise config.error("At least one certificate expected, but none found (trust store)")
    try:
        context.load_verify_locations(cadata=blocks.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError):
        raise config.error("the trust store's certificates do not parse") from None


# ---------------------------------------------------------------------------- files
def _refuse_jks(config: SslEngineConfig, name: str, store_type: str) -> None:
    if store_type == JKS_TYPE:
        raise config.error(
            f"{name}=JKS (Kafka's default) is not supported: convert the store to PKCS12"
            " (keytool -importkeystore -deststoretype PKCS12) and set"
            f" {name}=PKCS12, or use PEM"
        )


def _read_store(config: SslEngineConfig, name: str, location: str) -> bytes:
    path = Path(location)
    try:
        size = path.stat().st_size
        if size > MAX_STORE_BYTES:
            raise config.error(f"{name}={location} is {size} bytes; at most {MAX_STORE_BYTES}")
        return path.read_bytes()
    except OSError as error:
        raise config.error(f"cannot read {name}={location}: {error.strerror or error}") from None


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[Path]:
    """``data`` in a file only this user can read (0600, in a 0700 directory), removed after."""
    directory = Path(tempfile.mkdtemp(prefix="storage-core-tls-"))
    path = directory / "material.pem"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)
