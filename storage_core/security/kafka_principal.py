"""Who sent a request (Kafka's ``KafkaPrincipal`` and ``SecurityProtocol``).

A principal is a type and a name, written ``User:alice`` as ACLs and ``super.users`` name it.
What a connection's principal is depends on its listener's security protocol, as Kafka's
``DefaultKafkaPrincipalBuilder`` decides:

    PLAINTEXT                               User:ANONYMOUS
    SSL without a client certificate        User:ANONYMOUS
    SSL with a verified client certificate  User:<its DN, after ssl.principal.mapping.rules>
    SASL_PLAINTEXT, SASL_SSL                User:<the authenticated SASL authorization id>
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

USER_TYPE = "User"


class SecurityProtocol(Enum):
    """A listener's security protocol, with Kafka's ids (``SecurityProtocol.java``)."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @staticmethod
    def for_name(name: str) -> SecurityProtocol:
        """The protocol named ``name`` (case-insensitive), or ValueError naming the choices."""
        try:
            return SecurityProtocol[name.strip().upper()]
        except KeyError:
            choices = ", ".join(p.name for p in SecurityProtocol)
            raise ValueError(
                f"unknown security protocol {name.strip()!r}: expected one of {choices}"
            ) from None


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @staticmethod
    def parse(text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); the name may hold colons."""
        principal_type, sep, name = text.strip().partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"invalid principal {text!r}: expected <type>:<name>, e.g. User:alice")
        return KafkaPrincipal(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
