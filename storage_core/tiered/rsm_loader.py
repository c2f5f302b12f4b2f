"""Building the configured remote storage manager from the broker's or a job's settings."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from storage_core.errors import InvalidConfigError
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.format_config import ChunkedFormatConfig, split_format_config
from storage_core.tiered.remote_storage_manager import (
    RSM_CONFIG_PREFIX,
    RefusedRemoteStorageConfigError,
    RemoteStorageManager,
    SegmentManifestStore,
    UnknownRemoteStorageConfigError,
)

# Short names accepted for ``remote.log.storage.manager.class.name`` besides dotted paths.
RSM_CLASS_ALIASES = {
    "": "storage_core.tiered.local_tiered_storage.LocalTieredStorage",
    "LocalTieredStorage": "storage_core.tiered.local_tiered_storage.LocalTieredStorage",
    "S3RemoteStorageManager": (
        "storage_core.tiered.s3_remote_storage_manager.S3RemoteStorageManager"
    ),
}


def load_remote_storage_manager(class_name: str, config: Mapping[str, str]) -> RemoteStorageManager:
    """Kafka's ``remote.log.storage.manager.class.name``: a dotted path (or an alias of
    ``RSM_CLASS_ALIASES``; empty means ``LocalTieredStorage``) to a class with a
    ``from_config(config)`` static method; ``config`` holds the ``rsm.config.*`` settings.

    A store that keeps segment manifests (``LocalTieredStorage``, ``S3RemoteStorageManager``)
    comes wrapped in ``ChunkedRemoteStorageManager``: new copies are chunked, with the format
    settings of ``storage_core.tiered.chunked.format_config`` (the store gets the others)."""
    path = RSM_CLASS_ALIASES.get(class_name.strip(), class_name.strip())
    module_name, _, attribute = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InvalidConfigError(
            f"remote.log.storage.manager.class.name={class_name!r} names no importable class"
            f" ({exc}); use a dotted path or one of {sorted(a for a in RSM_CLASS_ALIASES if a)}"
        ) from exc
    from_config = getattr(cls, "from_config", None)
    if from_config is None:
        raise InvalidConfigError(f"{path} has no from_config(config) static method")
    format_settings, store_settings = split_format_config(config)
    try:
        manager = from_config(store_settings)  # UnknownRemoteStorageConfigError goes up as is
    except ValueError as exc:
        raise InvalidConfigError(f"invalid rsm.config.* for {path}: {exc}") from exc
    try:
        format_config = ChunkedFormatConfig.from_settings(format_settings)
    except ValueError as exc:
        # Compression, encryption or keys asked for and not usable: never copy without them.
        raise RefusedRemoteStorageConfigError(f"invalid rsm.config.* for {path}: {exc}") from exc
    if not isinstance(manager, RemoteStorageManager):
        raise InvalidConfigError(f"{path} is not a RemoteStorageManager")
    if isinstance(manager, SegmentManifestStore):
        return ChunkedRemoteStorageManager(manager, format_config)
    if format_settings:
        raise UnknownRemoteStorageConfigError(
            f"{path} cannot store the chunked format, so it does not honour"
            f" {', '.join(RSM_CONFIG_PREFIX + key for key in sorted(format_settings))}"
        )
    return manager
