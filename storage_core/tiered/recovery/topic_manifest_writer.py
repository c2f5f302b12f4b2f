"""TopicManifestWriter: the broker rewrites a topic's manifest in the bucket as soon as the
topic's configs, partition count or replication factor change, so that a restore after the
change recreates the topic as it is now, not as the last tiering run saw it.

The broker leading partition 0 of a remote-enabled topic writes it (one writer per topic), from
its remote log manager's task (``RemoteLogManager.run_once``, every
``remote.log.manager.task.interval.ms``). It remembers the settings it last found in the bucket
or wrote, per topic id, and compares against them only; the first time it sees a topic (after a
start, or a leadership move) it reads the bucket's manifest once. The per-partition figures are
the last manifest's (``topic_manifest.with_topic_settings``): the ``topic_manifests`` job
refreshes them, with the settings, every tiering run.

A manifest of a newer format version is never replaced (``TopicManifestError``, as for any
manifest that cannot be read: the job rewrites it whole). A topic deleted while its manifest was
written loses the manifest again at once, so that no manifest outlives its topic's data.

Thread-safety: one caller at a time (the remote log manager's task thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import Uuid
from storage_core.tiered.recovery.topic_manifest import (
    TopicManifest,
    same_topic_settings,
    with_topic_settings,
)
from storage_core.tiered.remote_object_keys import topic_manifest_key
from storage_core.tiered.remote_storage_manager import (
    RemoteObjectStore,
    RemoteResourceNotFoundError,
)

logger = logging.getLogger(__name__)

REMEMBERED_TOPICS_MAX = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSettings:
    """What a topic manifest records of a topic itself, as this broker's metadata has it."""

    topic_id: Uuid
    partition_count: int
    replication_factor: int
    configs: Mapping[str, str]


class TopicManifestWriter:
    """See the module docstring. ``settings_of(topic)`` is the topic as the broker knows it now
    (None once deleted)."""

    def __init__(
        self,
        store: RemoteObjectStore,
        settings_of: Callable[[str], TopicSettings | None],
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._store = store
        self._settings_of = settings_of
        self._clock = clock
        self._known: dict[Uuid, TopicSettings] = {}
        """Per topic id, the settings the bucket's manifest holds as far as this broker knows."""

    def maybe_write(self, topic: str) -> bool:
        """Rewrite ``topic``'s manifest if its settings differ from the bucket's; whether it
        was written. Store errors propagate (the caller retries on its next pass)."""
        settings = self._settings_of(topic)
        if settings is None or self._known.get(settings.topic_id) == settings:
            return False
        key = topic_manifest_key(self._store.prefix, topic, settings.topic_id)
        previous = self._read(key)
        manifest = with_topic_settings(
            previous,
            topic=topic,
            topic_id=settings.topic_id,
            partition_count=settings.partition_count,
            replication_factor=settings.replication_factor,
            configs=settings.configs,
            written_at_ms=self._clock.milliseconds(),
        )
        if previous is not None and same_topic_settings(previous, manifest):
            self._remember(settings)
            return False
        self._store.put_object(key, manifest.to_bytes())
        if self._settings_of(topic) is None:  # deleted meanwhile: no manifest without a topic
            self._store.delete_objects([key])
            return False
        self._remember(settings)
        logger.info(
            "topic manifest rewritten topic=%s topic_id=%s key=%s partitions=%d"
            " replication_factor=%d configs=%d",
            topic,
            settings.topic_id,
            key,
            settings.partition_count,
            settings.replication_factor,
            len(settings.configs),
        )
        return True

    def forget(self, topic_id: Uuid) -> None:
        """Read the bucket again next time (this broker no longer leads the topic's partition 0:
        another broker may write it meanwhile)."""
        self._known.pop(topic_id, None)

    def _read(self, key: str) -> TopicManifest | None:
        try:
            data = self._store.get_object(key)
        except RemoteResourceNotFoundError:
            return None
        return TopicManifest.from_bytes(data, where=key)

    def _remember(self, settings: TopicSettings) -> None:
        if len(self._known) >= REMEMBERED_TOPICS_MAX:
            self._known.clear()  # bounded: forgetting costs one read per topic, never a write
        self._known[settings.topic_id] = settings
