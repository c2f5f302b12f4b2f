"""``S3RemoteStorageConfig``: ``S3RemoteStorageManager``'s settings, parsed and validated.

The settings, their defaults and what they do are listed in ``s3_remote_storage_manager``'s
module docstring (``rsm.config.`` prefix optional); unknown keys are refused. Credentials never
pass through here: they come from the standard AWS chain only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from storage_core.tiered.local_tiered_storage import strip_rsm_prefix
from storage_core.tiered.remote_object_keys import normalize_prefix
from storage_core.tiered.remote_storage_manager import refuse_unknown_rsm_config

MIB = 1 << 20
S3_MAX_PART_SIZE_BYTES = 5 << 30
DEFAULT_REGION = "us-east-1"
CHECKSUM_ALGORITHMS = ("SHA256", "MD5")


# The settings of s3_remote_storage_manager's module docstring (without the rsm.config.
# prefix).
S3_CONFIG_KEYS = frozenset(
    {
        "s3.bucket.name",
        "s3.key.prefix",
        "s3.region",
        "s3.endpoint.url",
        "s3.path.style.access.enabled",
        "s3.multipart.threshold.bytes",
        "s3.multipart.part.size.bytes",
        "s3.checksum.algorithm",
        "s3.connect.timeout.ms",
        "s3.read.timeout.ms",
        "s3.retry.max.attempts",
        "s3.retry.backoff.ms",
        "s3.retry.backoff.max.ms",
        "s3.retry.total.timeout.ms",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class S3RemoteStorageConfig:
    """The settings of s3_remote_storage_manager's module docstring, validated."""

    bucket: str
    key_prefix: str = ""
    region: str | None = None
    endpoint_url: str | None = None
    path_style_access: bool = False
    multipart_threshold_bytes: int = 32 * MIB
    multipart_part_size_bytes: int = 16 * MIB
    checksum_algorithm: str = "SHA256"
    connect_timeout_ms: int = 2_000
    read_timeout_ms: int = 10_000
    retry_max_attempts: int = 5
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 2_000
    retry_total_timeout_ms: int = 20_000

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ValueError("rsm.config.s3.bucket.name is required")
        object.__setattr__(self, "key_prefix", normalize_prefix(self.key_prefix))
        if self.checksum_algorithm not in CHECKSUM_ALGORITHMS:
            raise ValueError(
                f"rsm.config.s3.checksum.algorithm must be one of {CHECKSUM_ALGORITHMS},"
                f" got {self.checksum_algorithm!r}"
            )
        if not 1 <= self.multipart_part_size_bytes <= S3_MAX_PART_SIZE_BYTES:
            raise ValueError(
                "rsm.config.s3.multipart.part.size.bytes must be in"
                f" [1, {S3_MAX_PART_SIZE_BYTES}], got {self.multipart_part_size_bytes}"
            )
        if not 0 <= self.multipart_threshold_bytes <= S3_MAX_PART_SIZE_BYTES:
            raise ValueError(
                "rsm.config.s3.multipart.threshold.bytes must be in"
                f" [0, {S3_MAX_PART_SIZE_BYTES}], got {self.multipart_threshold_bytes}"
            )
        for name in ("connect_timeout_ms", "read_timeout_ms", "retry_total_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 1 <= self.retry_max_attempts <= 100:
            raise ValueError(
                f"rsm.config.s3.retry.max.attempts must be in [1, 100], got"
                f" {self.retry_max_attempts}"
            )
        if not 0 <= self.retry_backoff_ms <= self.retry_backoff_max_ms:
            raise ValueError(
                "need 0 <= rsm.config.s3.retry.backoff.ms <= rsm.config.s3.retry.backoff.max.ms,"
                f" got {self.retry_backoff_ms} and {self.retry_backoff_max_ms}"
            )

    @staticmethod
    def from_config(config: Mapping[str, str]) -> S3RemoteStorageConfig:
        """Refuses keys it does not read (``UnknownRemoteStorageConfigError``)."""
        refuse_unknown_rsm_config("S3RemoteStorageManager", config, S3_CONFIG_KEYS)
        plain = strip_rsm_prefix(config)

        def integer(key: str, default: int) -> int:
            text = plain.get(key)
            if text is None:
                return default
            try:
                return int(text.strip())
            except ValueError:
                raise ValueError(f"rsm.config.{key} must be an integer, got {text!r}") from None

        style = plain.get("s3.path.style.access.enabled", "false").strip().lower()
        if style not in ("true", "false"):
            raise ValueError(
                f"rsm.config.s3.path.style.access.enabled must be true or false: {style!r}"
            )
        return S3RemoteStorageConfig(
            bucket=plain.get("s3.bucket.name", ""),
            key_prefix=plain.get("s3.key.prefix", ""),
            region=plain.get("s3.region") or None,
            endpoint_url=plain.get("s3.endpoint.url") or None,
            path_style_access=style == "true",
            multipart_threshold_bytes=integer("s3.multipart.threshold.bytes", 32 * MIB),
            multipart_part_size_bytes=integer("s3.multipart.part.size.bytes", 16 * MIB),
            checksum_algorithm=plain.get("s3.checksum.algorithm", "SHA256").strip().upper(),
            connect_timeout_ms=integer("s3.connect.timeout.ms", 2_000),
            read_timeout_ms=integer("s3.read.timeout.ms", 10_000),
            retry_max_attempts=integer("s3.retry.max.attempts", 5),
            retry_backoff_ms=integer("s3.retry.backoff.ms", 100),
            retry_backoff_max_ms=integer("s3.retry.backoff.max.ms", 2_000),
            retry_total_timeout_ms=integer("s3.retry.total.timeout.ms", 20_000),
        )
