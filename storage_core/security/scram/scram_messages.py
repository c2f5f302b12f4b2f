"""The four SCRAM messages (Kafka's ``ScramMessages``), parsed with Kafka's grammar and written
as Kafka writes them. All are US-ASCII text:

    client-first  n,[a=<authzid>],[m=<reserved>,]n=<saslname>,r=<cnonce>[,<ext>=<value>]*
    server-first  [m=<reserved>,]r=<cnonce+snonce>,s=<base64 salt>,i=<iterations>[,ext]*
    client-final  c=<base64 channel binding>,r=<nonce>[,ext]*,p=<base64 proof>
    server-final  (e=<error> | v=<base64 server signature>)[,ext]*

A saslname escapes "," as "=2C" and "=" as "=3D"; ``username`` reverses it. Extensions are
``key=value`` pairs (``tokenauth=true`` asks for delegation-token authentication). A message that
does not match raises ``SaslError`` (its text is not told to the client). Values; thread-safe.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from storage_core.security.sasl_errors import SaslError

_ALPHA = r"[A-Za-z]+"
_VALUE_SAFE = r"[\x01-\x2b\x2d-\x3c\x3e-\x7f]+"  # [\x01-\x7F] but "=" and ","
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # [\x01-\x7F] but ","
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # [\x21-\x7E] but ","
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_B64 = r"[a-zA-Z0-9/+]"
_BASE64 = rf"(?:{_B64}{{4}})*(?:{_B64}{{3}}=|{_B64}{{2}}==)?"
_RESERVED = rf"(?:m={_VALUE},)?"
_EXTENSIONS = rf"(?:,{_ALPHA}={_VALUE})*"

_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{_RESERVED}n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})"
)
_SERVER_FIRST = re.compile(
    rf"{_RESERVED}r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),"
    rf"i=(?P<iterations>[0-9]+){_EXTENSIONS}"
)
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_BASE64})"
)
_SERVER_FINAL = re.compile(
    rf"(?:e=(?P<error>{_VALUE_SAFE}))|(?:v=(?P<signature>{_BASE64})){_EXTENSIONS}"
)
MAX_ITERATIONS_DIGITS = 9  # an int32, as Java's Integer.parseInt reads it


def _text(message: bytes) -> str:
    return message.decode("utf-8", errors="replace")


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as error:  # the grammar admits only valid base64; kept as a guard
        raise SaslError("invalid base64 in a SCRAM message") from error


def parse_extensions(text: str) -> dict[str, str]:
    """``a=1,b=2`` -> {"a": "1", "b": "2"} (Kafka's ``Utils.parseMap``)."""
    result: dict[str, str] = {}
    for pair in (p for p in text.split(",") if p):
        key, _sep, value = pair.partition("=")
        result[key] = value
    return result


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientFirstMessage:
    sasl_name: str
    nonce: str
    authorization_id: str = ""
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    bare: str = ""
    """``n=<saslname>,r=<nonce>[,ext]``, exactly as received (or as written)."""

    @staticmethod
    def parse(message: bytes) -> ClientFirstMessage:
        text = _text(message)
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslError("Invalid SCRAM client first message format")
        extensions = match.group("extensions")
        # The AuthMessage uses the bare message the client sent, byte for byte (RFC 5802).
        bare_start = match.start("saslname") - len("n=")
        return ClientFirstMessage(
            sasl_name=match.group("saslname"),
            nonce=match.group("nonce"),
            authorization_id=match.group("authzid") or "",
            extensions=MappingProxyType(parse_extensions(extensions[1:] if extensions else "")),
            bare=text[bare_start:],
        )

    @staticmethod
    def build(
        sasl_name: str, nonce: str, extensions: Mapping[str, str] | None = None
    ) -> ClientFirstMessage:
        ext = dict(extensions or {})
        bare = f"n={sasl_name},r={nonce}" + "".join(f",{k}={v}" for k, v in ext.items())
        return ClientFirstMessage(
            sasl_name=sasl_name, nonce=nonce, extensions=MappingProxyType(ext), bare=bare
        )

    def gs2_header(self) -> str:
        return f"n,{self.authorization_id},"

    def to_bytes(self) -> bytes:
        return (self.gs2_header() + self.bare).encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFirstMessage:
    nonce: str
    """The client's nonce followed by the server's."""
    salt: bytes
    iterations: int

    @staticmethod
    def parse(message: bytes) -> ServerFirstMessage:
        match = _SERVER_FIRST.fullmatch(_text(message))
        if match is None:
            raise SaslError("Invalid SCRAM server first message format")
        digits = match.group("iterations")
        if len(digits) > MAX_ITERATIONS_DIGITS or int(digits) <= 0:
            raise SaslError("Invalid SCRAM server first message format: invalid iterations")
        return ServerFirstMessage(
            nonce=match.group("nonce"),
            salt=_b64decode(match.group("salt")),
            iterations=int(digits),
        )

    def to_message(self) -> str:
        return f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"

    def to_bytes(self) -> bytes:
        return self.to_message().encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientFinalMessage:
    channel_binding: bytes
    nonce: str
    proof: bytes = b""

    @staticmethod
    def parse(message: bytes) -> ClientFinalMessage:
        match = _CLIENT_FINAL.fullmatch(_text(message))
        if match is None:
            raise SaslError("Invalid SCRAM client final message format")
        return ClientFinalMessage(
            channel_binding=_b64decode(match.group("channel")),
            nonce=match.group("nonce"),
            proof=_b64decode(match.group("proof")),
        )

    def without_proof(self) -> str:
        return f"c={base64.b64encode(self.channel_binding).decode()},r={self.nonce}"

    def to_bytes(self) -> bytes:
        return f"{self.without_proof()},p={base64.b64encode(self.proof).decode()}".encode()

    def __repr__(self) -> str:  # the proof stays out of logs
        return f"ClientFinalMessage(nonce={self.nonce!r})"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFinalMessage:
    error: str | None = None
    server_signature: bytes | None = None

    @staticmethod
    def parse(message: bytes) -> ServerFinalMessage:
        match = _SERVER_FINAL.fullmatch(_text(message))
        if match is None:
            raise SaslError("Invalid SCRAM server final message format")
        error = match.group("error")
        if error is not None:
            return ServerFinalMessage(error=error)
        return ServerFinalMessage(server_signature=_b64decode(match.group("signature")))

    def to_bytes(self) -> bytes:
        if self.error is not None:
            return f"e={self.error}".encode()
        return f"v={base64.b64encode(self.server_signature or b'').decode()}".encode()
