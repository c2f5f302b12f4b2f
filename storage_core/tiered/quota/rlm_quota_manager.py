"""Kafka's ``RLMQuotaManager`` (KIP-956): a broker-wide byte rate over sampled windows, and
how long a caller must wait for it to fall back within its bound.

The rate is Kafka's ``SimpleRate`` over a ``WindowedSum`` (``SampledStat``), with
``MetricConfig(samples=N, timeWindow=W s)`` from ``remote.log.manager.{copy,fetch}.quota.
window.num`` (N, default 11) and ``.window.size.seconds`` (W, default 1)::

    samples      at most N + 1 windows, each [start, start + W) (a window is complete W
                 after its start; a record past it opens the next one, reusing the oldest)
    purge        a window whose last event is N * W or more ago is reset to now
    window size  max(now - start of the oldest window, W)            (ms)
    rate         sum of the windows' bytes / window size             (bytes per second)
    throttle     rate > bound: round((rate - bound) / bound * window size) ms, else 0
                 (``QuotaUtils.throttleTime``: the wait that brings the rate to the bound
                 if nothing more is recorded)

A bound of ``Long.MAX_VALUE`` (the default of ``remote.log.manager.{copy,fetch}.max.bytes.
per.second``) never throttles. ``update_quota`` changes the bound at once and keeps the
samples (Kafka's ``updateQuota``, called by the dynamic broker config).

``RLMQuotaMetrics``: Kafka's sensor of throttle times, ``<name>-avg`` and ``<name>-max``
over Kafka's default metric windows (2 samples of 30 s); both NaN until something is
recorded in them, as Kafka's ``Avg`` and ``Max``.

Thread-safety: every method takes the object's lock; any thread may call any method.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from storage_core.clock import SYSTEM_CLOCK, Clock

LONG_MAX_VALUE = 2**63 - 1
QUOTA_WINDOW_NUM_DEFAULT = 11
QUOTA_WINDOW_SIZE_SECONDS_DEFAULT = 1
# Kafka's MetricConfig defaults, used by RLMQuotaMetrics' sensors
METRIC_SAMPLES_DEFAULT = 2
METRIC_TIME_WINDOW_MS_DEFAULT = 30_000

COPY_MAX_BYTES_PER_SECOND = "remote.log.manager.copy.max.bytes.per.second"
COPY_QUOTA_WINDOW_NUM = "remote.log.manager.copy.quota.window.num"
COPY_QUOTA_WINDOW_SIZE_SECONDS = "remote.log.manager.copy.quota.window.size.seconds"
FETCH_MAX_BYTES_PER_SECOND = "remote.log.manager.fetch.max.bytes.per.second"
FETCH_QUOTA_WINDOW_NUM = "remote.log.manager.fetch.quota.window.num"
FETCH_QUOTA_WINDOW_SIZE_SECONDS = "remote.log.manager.fetch.quota.window.size.seconds"


class QuotaConfigError(ValueError):
    """A quota setting is out of its range (Kafka's ``atLeast(1)``); fix the setting."""


def bytes_per_second_setting(props: Mapping[str, str], name: str) -> int:
    """A ``*.max.bytes.per.second`` setting (Kafka's LONG, at least 1; default unbounded)."""
    return _at_least_one(props, name, LONG_MAX_VALUE)


def _at_least_one(props: Mapping[str, str], name: str, default: int) -> int:
    text = props.get(name)
    if text is None or not str(text).strip():
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise QuotaConfigError(
            f"Invalid value {text} for configuration {name}: not a number; give an integer"
            " of at least 1"
        ) from None
    if value < 1:
        raise QuotaConfigError(
            f"Invalid value {value} for configuration {name}: Value must be at least 1"
        )
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RLMQuotaManagerConfig:
    """Kafka's ``RLMQuotaManagerConfig``: the bound and the windows of one quota."""

    quota_bytes_per_second: float  # Kafka's Quota bound (a job's share may be fractional)
    num_quota_samples: int = QUOTA_WINDOW_NUM_DEFAULT
    quota_window_size_seconds: int = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT

    def __post_init__(self) -> None:
        for name in ("quota_bytes_per_second", "num_quota_samples", "quota_window_size_seconds"):
            if getattr(self, name) < 1:
                raise QuotaConfigError(f"{name} must be at least 1, got {getattr(self, name)}")

    @staticmethod
    def copy_quota(props: Mapping[str, str]) -> RLMQuotaManagerConfig:
        """Kafka's ``copyQuotaManagerConfig`` from broker properties."""
        return RLMQuotaManagerConfig(
            quota_bytes_per_second=bytes_per_second_setting(props, COPY_MAX_BYTES_PER_SECOND),
            num_quota_samples=_at_least_one(props, COPY_QUOTA_WINDOW_NUM, QUOTA_WINDOW_NUM_DEFAULT),
            quota_window_size_seconds=_at_least_one(
                props, COPY_QUOTA_WINDOW_SIZE_SECONDS, QUOTA_WINDOW_SIZE_SECONDS_DEFAULT
            ),
        )

    @staticmethod
    def fetch_quota(props: Mapping[str, str]) -> RLMQuotaManagerConfig:
        """Kafka's ``fetchQuotaManagerConfig`` from broker properties."""
        return RLMQuotaManagerConfig(
            quota_bytes_per_second=bytes_per_second_setting(props, FETCH_MAX_BYTES_PER_SECOND),
            num_quota_samples=_at_least_one(
                props, FETCH_QUOTA_WINDOW_NUM, QUOTA_WINDOW_NUM_DEFAULT
            ),
            quota_window_size_seconds=_at_least_one(
                props, FETCH_QUOTA_WINDOW_SIZE_SECONDS, QUOTA_WINDOW_SIZE_SECONDS_DEFAULT
            ),
        )


class _Sample:
    __slots__ = ("event_count", "last_event_ms", "max", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0
        self.max = -math.inf


class SampledStat:
    """Kafka's ``SampledStat`` (sum, count and max per sample). Not thread-safe: its owner
    locks it."""

    def __init__(self, *, samples: int, time_window_ms: int) -> None:
        if samples < 1 or time_window_ms < 1:
            raise ValueError(
                f"samples and time_window_ms must be >= 1: {samples}, {time_window_ms}"
            )
        self.num_samples = samples
        self.time_window_ms = time_window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.time_window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.max = max(sample.max, value)
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % (self.num_samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def purge_obsolete_samples(self, now_ms: int) -> None:
        expire_age_ms = self.num_samples * self.time_window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age_ms:
                sample.reset(now_ms)

    def oldest_start_ms(self, now_ms: int) -> int:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return min(sample.start_ms for sample in self._samples)

    def total(self, now_ms: int) -> float:
        self.purge_obsolete_samples(now_ms)
        return sum(sample.value for sample in self._samples)

    def average(self, now_ms: int) -> float:
        """Kafka's ``Avg``: NaN when nothing was recorded in the kept samples."""
        self.purge_obsolete_samples(now_ms)
        count = sum(sample.event_count for sample in self._samples)
        return sum(s.value for s in self._samples) / count if count else math.nan

    def maximum(self, now_ms: int) -> float:
        """Kafka's ``Max``: NaN when nothing was recorded in the kept samples."""
        self.purge_obsolete_samples(now_ms)
        if not any(sample.event_count for sample in self._samples):
            return math.nan
        return max(sample.max for sample in self._samples)

    def simple_rate_window_ms(self, now_ms: int) -> int:
        """Kafka's ``SimpleRate.windowSize``."""
        self.purge_obsolete_samples(now_ms)
        return max(now_ms - self.oldest_start_ms(now_ms), self.time_window_ms)


class RLMQuotaManager:
    """One quota (copy or fetch) of the remote log manager; see the module docstring."""

    def __init__(self, config: RLMQuotaManagerConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._quota_bytes_per_second = config.quota_bytes_per_second
        self._rate = SampledStat(
            samples=config.num_quota_samples,
            time_window_ms=config.quota_window_size_seconds * 1000,
        )

    @property
    def quota_bytes_per_second(self) -> float:
        with self._lock:
            return self._quota_bytes_per_second

    def update_quota(self, quota_bytes_per_second: float) -> None:
        if quota_bytes_per_second < 1:
            raise QuotaConfigError(
                f"a byte-rate quota must be at least 1, got {quota_bytes_per_second}"
            )
        with self._lock:
            self._quota_bytes_per_second = quota_bytes_per_second

    def record(self, size_bytes: float) -> None:
        with self._lock:
            self._rate.record(size_bytes, self._clock.milliseconds())

    def byte_rate(self) -> float:
        """The measured rate (bytes per second): Kafka's ``byte-rate`` metric."""
        with self._lock:
            return self._measure(self._clock.milliseconds())

    def _measure(self, now_ms: int) -> float:
        window_ms = self._rate.simple_rate_window_ms(now_ms)
        return self._rate.total(now_ms) / (window_ms / 1000)

    def get_throttle_time_ms(self) -> int:
        """0 within the quota, else the wait (ms) that brings the rate back to it."""
        with self._lock:
            now_ms = self._clock.milliseconds()
            bound = self._quota_bytes_per_second
            rate = self._measure(now_ms)
            if rate <= bound:
                return 0
            window_ms = self._rate.simple_rate_window_ms(now_ms)
            return round((rate - bound) / bound * window_ms)

    def is_quota_exceeded(self) -> bool:
        return self.get_throttle_time_ms() > 0


class RLMQuotaMetrics:
    """Kafka's ``RLMQuotaMetrics``: a sensor of throttle times (ms), read as ``-avg``/``-max``."""

    def __init__(self, name: str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._stat = SampledStat(
            samples=METRIC_SAMPLES_DEFAULT, time_window_ms=METRIC_TIME_WINDOW_MS_DEFAULT
        )

    def record(self, throttle_time_ms: float) -> None:
        with self._lock:
            self._stat.record(throttle_time_ms, self._clock.milliseconds())

    def avg(self) -> float:
        with self._lock:
            return self._stat.average(self._clock.milliseconds())

    def max(self) -> float:
        with self._lock:
            return self._stat.maximum(self._clock.milliseconds())
