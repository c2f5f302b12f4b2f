"""The chunked format's settings (Aiven's names, ``rsm.config.`` prefix optional)::

    chunk.size                       original bytes per chunk (default 4 MiB)
    chunk.frame.size                 original bytes per frame, the unit each check covers: a
                                     short read of an uncached chunk reads its frames only
                                     (default 256 KiB; at most the chunk size is used)
    compression.enabled              zstd per chunk (default false)
    compression.heuristic.enabled    skip it for segments whose batches are compressed
                                     (default false)
    encryption.enabled               AES-256-GCM per chunk (default false)
    encryption.key.pair.id           the active key pair (required with encryption)
    encryption.key.pairs             the key ring: comma-separated ids
    encryption.key.pairs.<id>.public.key.file / .private.key.file   PEM files
    fetch.chunk.cache.class          memory (default) or disk (Aiven's class names accepted)
    fetch.chunk.cache.path           the disk cache's directory (must exist; disk only)
    fetch.chunk.cache.size           bytes of original chunks kept (default 64 MiB)
    fetch.chunk.cache.retention.ms   an entry not read for this long goes (default 600000)
    fetch.chunk.cache.prefetch.max.size   original bytes read ahead of a sequential reader,
                                     into the next segment too (default 0: none)

The ring may be configured with encryption off: segments copied while it was on still read.
Every other key belongs to the store (``split_format_config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from storage_core.tiered.chunked.key_ring import KeyRing, RsaKeyPair
from storage_core.tiered.remote_storage_manager import RSM_CONFIG_PREFIX

DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024
DEFAULT_FRAME_SIZE = 256 * 1024
MAX_CHUNK_SIZE = 1 << 30
_FLAT_KEYS = frozenset(
    {
        "chunk.size",
        "chunk.frame.size",
        "compression.enabled",
        "compression.heuristic.enabled",
        "encryption.enabled",
        "encryption.key.pair.id",
        "encryption.key.pairs",
    }
)
_CACHE_KEYS = frozenset(
    {
        "fetch.chunk.cache.class",
        "fetch.chunk.cache.path",
        "fetch.chunk.cache.size",
        "fetch.chunk.cache.retention.ms",
        "fetch.chunk.cache.prefetch.max.size",
    }
)
CACHE_CLASSES = {
    "memory": "memory",
    "disk": "disk",
    "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache": "memory",
    "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache": "disk",
}
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
DEFAULT_CACHE_RETENTION_MS = 600_000
_KEY_PAIRS = "encryption.key.pairs."
_KEY_FILES = (".public.key.file", ".private.key.file")


def _plain(key: str) -> str:
    return key[len(RSM_CONFIG_PREFIX) :] if key.startswith(RSM_CONFIG_PREFIX) else key


def is_format_key(key: str) -> bool:
    plain = _plain(key)
    return (
        plain in _FLAT_KEYS
        or plain in _CACHE_KEYS
        or (plain.startswith(_KEY_PAIRS) and plain.endswith(_KEY_FILES))
    )


def split_format_config(config: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(format settings without prefix, the store's settings as given)``."""
    format_settings = {_plain(k): v for k, v in config.items() if is_format_key(k)}
    store_settings = {k: v for k, v in config.items() if not is_format_key(k)}
    return format_settings, store_settings


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkCacheConfig:
    kind: str = "memory"  # or "disk"
    path: Path | None = None
    size_bytes: int = DEFAULT_CACHE_BYTES
    retention_ms: int = DEFAULT_CACHE_RETENTION_MS
    prefetch_max_bytes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("memory", "disk"):
            raise ValueError(f"unknown chunk cache kind {self.kind!r}")
        if (self.kind == "disk") != (self.path is not None):
            raise ValueError(
                "rsm.config.fetch.chunk.cache.path is required by the disk chunk cache and"
                " read by no other"
            )
        if self.size_bytes <= 0:
            raise ValueError(
                f"rsm.config.fetch.chunk.cache.size must be > 0 bytes, got {self.size_bytes}"
            )
        if self.retention_ms <= 0:
            raise ValueError(
                f"rsm.config.fetch.chunk.cache.retention.ms must be > 0, got {self.retention_ms}"
            )
        if self.prefetch_max_bytes < 0:
            raise ValueError(
                "rsm.config.fetch.chunk.cache.prefetch.max.size must be >= 0, got"
                f" {self.prefetch_max_bytes}"
            )

    @staticmethod
    def from_settings(settings: Mapping[str, str]) -> ChunkCacheConfig:
        name = settings.get("fetch.chunk.cache.class", "memory").strip()
        if name not in CACHE_CLASSES:
            raise ValueError(
                f"rsm.config.fetch.chunk.cache.class={name} is none of"
                f" {', '.join(sorted(CACHE_CLASSES))}"
            )
        path = settings.get("fetch.chunk.cache.path")
        return ChunkCacheConfig(
            kind=CACHE_CLASSES[name],
            path=Path(path) if path else None,
            size_bytes=_number(settings, "fetch.chunk.cache.size", DEFAULT_CACHE_BYTES),
            retention_ms=_number(
                settings, "fetch.chunk.cache.retention.ms", DEFAULT_CACHE_RETENTION_MS
            ),
            prefetch_max_bytes=_number(settings, "fetch.chunk.cache.prefetch.max.size", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkedFormatConfig:
    chunk_size: int = DEFAULT_CHUNK_SIZE
    frame_size: int = DEFAULT_FRAME_SIZE
    compression: bool = False
    compression_heuristic: bool = False
    encryption: bool = False
    key_ring: KeyRing | None = None
    cache: ChunkCacheConfig = ChunkCacheConfig()

    def __post_init__(self) -> None:
        if not 0 < self.chunk_size <= MAX_CHUNK_SIZE:
            raise ValueError(
                f"rsm.config.chunk.size must be between 1 and {MAX_CHUNK_SIZE}, got"
                f" {self.chunk_size}"
            )
        if not 0 < self.frame_size <= MAX_CHUNK_SIZE:
            raise ValueError(
                f"rsm.config.chunk.frame.size must be between 1 and {MAX_CHUNK_SIZE}, got"
                f" {self.frame_size}"
            )
        if self.encryption and self.key_ring is None:
            raise ValueError(
                "rsm.config.encryption.enabled=true needs a key ring:"
                " rsm.config.encryption.key.pairs and rsm.config.encryption.key.pair.id"
            )

    @property
    def effective_frame_size(self) -> int:
        """The frame size new copies are cut with: ``frame_size``, at most the chunk size."""
        return min(self.frame_size, self.chunk_size)

    @staticmethod
    def from_settings(settings: Mapping[str, str]) -> ChunkedFormatConfig:
        """From ``split_format_config``'s first half; ``ValueError`` naming the setting."""
        return ChunkedFormatConfig(
            chunk_size=_number(settings, "chunk.size", DEFAULT_CHUNK_SIZE),
            frame_size=_number(settings, "chunk.frame.size", DEFAULT_FRAME_SIZE),
            compression=_bool(settings, "compression.enabled"),
            compression_heuristic=_bool(settings, "compression.heuristic.enabled"),
            encryption=_bool(settings, "encryption.enabled"),
            key_ring=_key_ring(settings, required=_bool(settings, "encryption.enabled")),
            cache=ChunkCacheConfig.from_settings(settings),
        )


def _number(settings: Mapping[str, str], key: str, default: int) -> int:
    text = settings.get(key)
    if text is None:
        return default
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"rsm.config.{key} must be a whole number, got {text!r}") from None


def _bool(settings: Mapping[str, str], key: str) -> bool:
    text = settings.get(key, "false").strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"rsm.config.{key} must be true or false, got {text!r}")
    return text == "true"


def _key_ring(settings: Mapping[str, str], *, required: bool) -> KeyRing | None:
    ids = [i.strip() for i in settings.get("encryption.key.pairs", "").split(",") if i.strip()]
    file_keys = sorted(k for k in settings if k.startswith(_KEY_PAIRS))
    strays = [k for k in file_keys if k[len(_KEY_PAIRS) :].rsplit(".", 3)[0] not in ids]
    if strays:
        raise ValueError(
            f"rsm.config.{strays[0]} names a key pair that rsm.config.encryption.key.pairs"
            f" ({', '.join(ids) or 'empty'}) does not list"
        )
    active = settings.get("encryption.key.pair.id", "").strip()
    if not ids:
        if active:
            raise ValueError(
                f"rsm.config.encryption.key.pair.id={active} but rsm.config.encryption.key.pairs"
                " lists no key pair"
            )
        return None
    pairs = {}
    for key_id in ids:
        public = settings.get(f"{_KEY_PAIRS}{key_id}.public.key.file")
        private = settings.get(f"{_KEY_PAIRS}{key_id}.private.key.file")
        if not public:
            raise ValueError(f"rsm.config.{_KEY_PAIRS}{key_id}.public.key.file is required")
        pairs[key_id] = RsaKeyPair.from_pem_files(
            key_id, Path(public), Path(private) if private else None
        )
    if not active:
        if required:
            raise ValueError(
                "rsm.config.encryption.enabled=true needs rsm.config.encryption.key.pair.id"
                f" (one of {', '.join(ids)})"
            )
        active = ids[0]  # never used to write: encryption is off
    return KeyRing(active, pairs)
