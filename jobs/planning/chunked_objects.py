"""The objects check of a segment copied in the chunked format, from an object listing alone.

A chunked copy's custom metadata (``storage_core.tiered.chunked.custom_metadata``, in its
COPY_SEGMENT_FINISHED update) says the format and the stored size of all its objects, the
``rsm-manifest`` included. A listing gives each object's size, so two checks cost no request
to the store:

- the ``rsm-manifest`` object is there (without it the segment's bytes are not served);
- the listed objects add up to the stored size (an object cut short, grown or replaced by
  one of another size is caught; a chunk whose bytes changed in place is not: only reading
  it finds that, as brokers do, or ``jobs.reconcile --verify-chunks``).
"""

from __future__ import annotations

from collections.abc import Mapping

from storage_core.tiered.chunked.custom_metadata import chunked_format_version, remote_size
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix


def chunked_stored_size(custom_metadata: bytes | None) -> int | None:
    """The stored size of a chunked copy's objects, or ``None`` (plain format, or custom
    metadata without it)."""
    if chunked_format_version(custom_metadata) is None:
        return None
    return remote_size(custom_metadata)


def chunked_objects_problem(stored_size: int | None, sizes: Mapping[str, int]) -> str | None:
    """What the listing (``sizes``: bytes by object suffix) shows wrong with a chunked copy
    whose objects hold ``stored_size`` bytes; ``None`` when nothing (or not chunked)."""
    if stored_size is None:
        return None
    if RemoteObjectSuffix.SEGMENT_MANIFEST.value not in sizes:
        return "copied chunked and its .rsm-manifest object is missing: its bytes are not served"
    listed = sum(sizes.values())
    if listed != stored_size:
        return (
            f"its objects hold {listed} bytes, its copy stored {stored_size}: an object was"
            " cut short, grew or was replaced"
        )
    return None
