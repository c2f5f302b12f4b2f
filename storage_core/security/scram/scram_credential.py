"""A user's SCRAM credential (Kafka's ``ScramCredential``) and its text in ZooKeeper (Kafka's
``ScramCredentialUtils``), one per mechanism in the user's config entity:

    salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

The broker keeps StoredKey and ServerKey, never the password nor the salted password.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass

from storage_core.security.scram.scram_formatter import ScramFormatter
from storage_core.security.scram.scram_mechanism import ScramMechanism

SALT_BYTES = 32  # Kafka's ScramFormatter.secureRandomBytes for a new credential
_FIELDS = ("salt", "stored_key", "server_key", "iterations")


class InvalidScramCredentialError(ValueError):
    """A credential text that is not ``salt=..,stored_key=..,server_key=..,iterations=N``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs
        return f"ScramCredential(iterations={self.iterations})"

    @staticmethod
    def from_salted_password(
        mechanism: ScramMechanism, *, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """What AlterUserScramCredentials stores from the client's salted password."""
        formatter = ScramFormatter(mechanism)
        return ScramCredential(
            salt=salt,
            stored_key=formatter.stored_key(formatter.client_key(salted_password)),
            server_key=formatter.server_key(salted_password),
            iterations=iterations,
        )

    @staticmethod
    def generate(
        mechanism: ScramMechanism, password: str, iterations: int, *, salt: bytes | None = None
    ) -> ScramCredential:
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        salted = ScramFormatter(mechanism).salted_password(password, salt, iterations)
        return ScramCredential.from_salted_password(
            mechanism, salt=salt, salted_password=salted, iterations=iterations
        )


def credential_to_string(credential: ScramCredential) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return (
        f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
        f"server_key={b64(credential.server_key)},iterations={credential.iterations}"
    )


def credential_from_string(text: str) -> ScramCredential:
    """Kafka's ``ScramCredentialUtils.credentialFromString``; InvalidScramCredentialError if a
    field is missing or malformed (the message names the field, never its value)."""
    fields: dict[str, str] = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        if not sep:
            raise InvalidScramCredentialError("a SCRAM credential field is not key=value")
        fields[key.strip()] = value.strip()
    if set(fields) != set(_FIELDS):
        raise InvalidScramCredentialError(
            f"a SCRAM credential has the fields {sorted(fields)}, expected {sorted(_FIELDS)}"
        )
    try:
        decoded = {
            name: base64.b64decode(fields[name], validate=True)
            for name in ("salt", "stored_key", "server_key")
        }
        iterations = int(fields["iterations"])
    except (binascii.Error, ValueError) as error:
        raise InvalidScramCredentialError(
            "a SCRAM credential holds invalid base64 or iterations"
        ) from error
    return ScramCredential(
        salt=decoded["salt"],
        stored_key=decoded["stored_key"],
        server_key=decoded["server_key"],
        iterations=iterations,
    )
