"""Kafka's ``ScramFormatter``: the SCRAM computations (RFC 5802 section 3).

    SaltedPassword  = Hi(password, salt, i)             (PBKDF2 with HMAC-H)
    ClientKey       = HMAC(SaltedPassword, "Client Key")
    StoredKey       = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientSignature = HMAC(StoredKey, AuthMessage)
    ClientProof     = ClientKey XOR ClientSignature
    ServerSignature = HMAC(ServerKey, AuthMessage)

The password is its UTF-8 bytes: Kafka applies no SASLprep (``normalize`` = ``toBytes``).
Pure functions of their inputs; thread-safe.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from storage_core.security.scram.scram_mechanism import ScramMechanism

NONCE_BITS = 130  # Kafka's secureRandomString: a 130-bit number in base 36
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


class ScramFormatter:
    def __init__(self, mechanism: ScramMechanism) -> None:
        self.mechanism = mechanism

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.mechanism.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.mechanism.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(
            self.mechanism.hash_name, password.encode("utf-8"), salt, iterations
        )

    def client_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Client Key")

    def stored_key(self, client_key: bytes) -> bytes:
        return self.hash(client_key)

    def server_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Server Key")

    def client_signature(self, stored_key: bytes, auth_message: bytes) -> bytes:
        return self.hmac(stored_key, auth_message)

    def client_proof(self, salted_password: bytes, auth_message: bytes) -> bytes:
        client_key = self.client_key(salted_password)
        signature = self.client_signature(self.stored_key(client_key), auth_message)
        return xor(client_key, signature)

    def server_signature(self, server_key: bytes, auth_message: bytes) -> bytes:
        return self.hmac(server_key, auth_message)

    def stored_key_from_proof(self, client_signature: bytes, proof: bytes) -> bytes:
        """H(ClientSignature XOR ClientProof): the StoredKey a right proof gives back."""
        return self.hash(xor(client_signature, proof))


def auth_message(
    client_first_bare: str, server_first: str, client_final_without_proof: str
) -> bytes:
    return f"{client_first_bare},{server_first},{client_final_without_proof}".encode()


def xor(first: bytes, second: bytes) -> bytes:
    """Bytewise XOR; both of one length (a proof of another length is refused before)."""
    if len(first) != len(second):
        raise ValueError(f"cannot XOR {len(first)} bytes with {len(second)} bytes")
    return bytes(a ^ b for a, b in zip(first, second, strict=True))


def sasl_name(username: str) -> str:
    """A user name as SCRAM writes it: "=" -> "=3D", "," -> "=2C"."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username(name: str) -> str:
    """The user name a SCRAM ``saslname`` stands for; ValueError if an "=" is not one of the
    two escapes (Kafka's ``ScramFormatter.username``)."""
    unescaped = name.replace("=2C", ",")
    if "=" in unescaped.replace("=3D", ""):
        raise ValueError("invalid SCRAM user name: '=' must be written =3D")
    return unescaped.replace("=3D", "=")


def secure_random_string() -> str:
    """A nonce as Kafka makes one: a random 130-bit number written in base 36."""
    number = secrets.randbits(NONCE_BITS)
    if number == 0:
        return "0"
    digits = []
    while number:
        number, digit = divmod(number, 36)
        digits.append(_BASE36[digit])
    return "".join(reversed(digits))
