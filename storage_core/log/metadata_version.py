"""Kafka's inter-broker protocol / metadata version strings, as ``MetadataVersion`` of Kafka 3.9
reads them (``message.format.version`` is validated by its ``MetadataVersionValidator``; the
setting itself is a no-op from 3.0, every batch being written in format v2).

Accepted (``MetadataVersion.fromVersionString``): a version's full name (``0.10.0-IV1``,
``3.0-IV1``, ``0.8.2``), a release (``0.10.0``, ``2.8``: its latest version, production ones
only), and anything whose first segments (split on ``.``: three when it starts with ``0.``,
else two) are one of those, so ``0.10.0.0``, ``0.10.0.1`` and ``2.8.0`` are accepted, and
(Kafka's own example) ``1.0.1`` reads as ``1.0``. Everything else is refused.

Thread-safety: constants and a pure function.
"""

from __future__ import annotations

# (release, sub-versions) in Kafka 3.9's order; a sub-version of "" names the release itself.
_VERSIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("0.8.0", ("",)),
    ("0.8.1", ("",)),
    ("0.8.2", ("",)),
    ("0.9.0", ("",)),
    ("0.10.0", ("IV0", "IV1")),
    ("0.10.1", ("IV0", "IV1", "IV2")),
    ("0.10.2", ("IV0",)),
    ("0.11.0", ("IV0", "IV1", "IV2")),
    ("1.0", ("IV0",)),
    ("1.1", ("IV0",)),
    ("2.0", ("IV0", "IV1")),
    ("2.1", ("IV0", "IV1", "IV2")),
    ("2.2", ("IV0", "IV1")),
    ("2.3", ("IV0", "IV1")),
    ("2.4", ("IV0", "IV1")),
    ("2.5", ("IV0",)),
    ("2.6", ("IV0",)),
    ("2.7", ("IV0", "IV1", "IV2")),
    ("2.8", ("IV0", "IV1")),
    ("3.0", ("IV0", "IV1")),
    ("3.1", ("IV0",)),
    ("3.2", ("IV0",)),
    ("3.3", ("IV0", "IV1", "IV2", "IV3")),
    ("3.4", ("IV0",)),
    ("3.5", ("IV0", "IV1", "IV2")),
    ("3.6", ("IV0", "IV1", "IV2")),
    ("3.7", ("IV0", "IV1", "IV2", "IV3", "IV4")),
    ("3.8", ("IV0",)),
    ("3.9", ("IV0",)),
    ("4.0", ("IV0", "IV1")),  # not production in 3.9: only by full name
)
_NOT_PRODUCTION_RELEASES = frozenset({"4.0"})
# Kafka's IBP_VERSIONS: every full name, and every release with a production version.
_NAMES: frozenset[str] = frozenset(
    {release if sub == "" else f"{release}-{sub}" for release, subs in _VERSIONS for sub in subs}
    | {release for release, _subs in _VERSIONS if release not in _NOT_PRODUCTION_RELEASES}
)


def is_metadata_version(text: str) -> bool:
    """Whether Kafka's ``MetadataVersion.fromVersionString(text)`` finds a version."""
    segments = text.split(".")
    while len(segments) > 1 and segments[-1] == "":  # Java's split drops trailing empties
        segments.pop()
    kept = 3 if text.startswith("0.") else 2
    key = text if kept >= len(segments) else ".".join(segments[:kept])
    return key in _NAMES
