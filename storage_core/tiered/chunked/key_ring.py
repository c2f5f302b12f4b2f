"""The key ring of the chunked format: RSA key pairs that wrap per-segment data keys.

Each segment is encrypted with its own random AES-256 data key; the manifest stores that key
wrapped (RSA-OAEP, SHA-256) by the ring's active key pair, with the pair's id. Rotation is a
new active pair: segments written before keep naming the pair that wrapped their key, which
stays in the ring (at least its private key) to read them. Settings, with Aiven's names::

    rsm.config.encryption.key.pair.id                       the active pair
    rsm.config.encryption.key.pairs                         the ring: comma-separated ids
    rsm.config.encryption.key.pairs.<id>.public.key.file    PEM
    rsm.config.encryption.key.pairs.<id>.private.key.file   PEM
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from storage_core.tiered.chunked.errors import MissingEncryptionKeyError

_OAEP = padding.OAEP(
    mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None
)
MIN_RSA_KEY_BITS = 2048


@dataclass(frozen=True, slots=True)
class WrappedDataKey:
    """A data key encrypted by the key pair ``key_id``."""

    key_id: str
    ciphertext: bytes


@dataclass(frozen=True, slots=True)
class RsaKeyPair:
    """One pair of the ring; ``private`` may be absent on a writer that never reads."""

    key_id: str
    public: rsa.RSAPublicKey
    private: rsa.RSAPrivateKey | None

    @staticmethod
    def from_pem_files(key_id: str, public_file: Path, private_file: Path | None) -> RsaKeyPair:
        """``ValueError`` naming the key id and the file when a file is missing, is not PEM or
        holds no RSA key of at least 2048 bits (the key's bytes are never in the message)."""
        public = _load(key_id, "public", public_file, serialization.load_pem_public_key)
        private = (
            None
            if private_file is None
            else _load(key_id, "private", private_file, _load_private_pem)
        )
        if not isinstance(public, rsa.RSAPublicKey):
            raise ValueError(f"key pair {key_id!r}: {public_file} holds no RSA public key")
        if private is not None and not isinstance(private, rsa.RSAPrivateKey):
            raise ValueError(f"key pair {key_id!r}: {private_file} holds no RSA private key")
        if public.key_size < MIN_RSA_KEY_BITS:
            raise ValueError(
                f"key pair {key_id!r}: the RSA key has {public.key_size} bits, at least"
                f" {MIN_RSA_KEY_BITS} are required"
            )
        if private is not None and private.public_key().public_numbers() != public.public_numbers():
            raise ValueError(
                f"key pair {key_id!r}: {private_file} is not the private key of {public_file}"
            )
        return RsaKeyPair(key_id, public, private)


def _load_private_pem(data: bytes) -> object:
    return serialization.load_pem_private_key(data, password=None)


def _load(key_id: str, kind: str, path: Path, loader: object) -> object:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(
            f"key pair {key_id!r}: cannot read the {kind} key file {path}: {exc.strerror}"
        ) from None
    try:
        return loader(data)  # type: ignore[operator]
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"key pair {key_id!r}: {path} is not an unencrypted PEM {kind} key"
            f" ({type(exc).__name__})"
        ) from None


class KeyRing:
    """The ring: wraps with the active pair, unwraps with the pair a segment names."""

    def __init__(self, active_key_id: str, pairs: dict[str, RsaKeyPair]) -> None:
        if active_key_id not in pairs:
            raise ValueError(
                f"the active key pair {active_key_id!r} is not in the key ring"
                f" ({', '.join(sorted(pairs)) or 'empty'})"
            )
        self.active_key_id = active_key_id
        self._pairs = dict(pairs)

    @property
    def key_ids(self) -> list[str]:
        return sorted(self._pairs)

    def wrap(self, data_key: bytes) -> WrappedDataKey:
        pair = self._pairs[self.active_key_id]
        return WrappedDataKey(pair.key_id, pair.public.encrypt(data_key, _OAEP))

    def unwrap(self, wrapped: WrappedDataKey, *, segment: str) -> bytes:
        """The data key; ``MissingEncryptionKeyError`` naming the key id when the ring cannot
        unwrap it (no such pair, no private key, or a key that does not open it)."""
        pair = self._pairs.get(wrapped.key_id)
        if pair is None or pair.private is None:
            what = "no key pair" if pair is None else "the key pair without its private key"
            raise MissingEncryptionKeyError(
                f"{segment} is encrypted with a data key wrapped by key pair"
                f" {wrapped.key_id!r}, and the key ring holds {what} of that id"
                f" (ring: {', '.join(self.key_ids)}): add"
                f" rsm.config.encryption.key.pairs.{wrapped.key_id}.private.key.file"
            )
        try:
            return pair.private.decrypt(wrapped.ciphertext, _OAEP)
        except ValueError:
            raise MissingEncryptionKeyError(
                f"{segment}: key pair {wrapped.key_id!r} of the key ring does not open the"
                " segment's data key (the pair was replaced by another of the same id?)"
            ) from None
