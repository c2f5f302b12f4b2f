"""Errors of the chunked format; each is a ``RemoteStorageError`` (KAFKA_STORAGE_ERROR to a
fetching client), so a bad object is never served and never taken for a missing one."""

from __future__ import annotations

from storage_core.tiered.remote_storage_manager import RemoteStorageError


class ChunkIntegrityError(RemoteStorageError):
    """A stored chunk (or index object) failed its checksum or authentication tag, ended
    early, or is missing while the manifest lists it: the message names the object, the chunk
    and its original position."""


class SegmentManifestError(RemoteStorageError):
    """A segment manifest that cannot be read: not JSON, an unknown format version, or fields
    that contradict each other."""


class MissingEncryptionKeyError(RemoteStorageError):
    """An encrypted segment's data key is wrapped by a key pair the key ring does not hold (or
    holds without its private key): the message names the key id."""
