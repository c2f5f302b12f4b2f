"""A small, bounded, thread-safe registry of broker metrics keyed by Kafka's JMX names.

A series is one ``MetricName``: group, type, name and tags, as Kafka's Yammer metrics are
named, e.g. ``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t``.

Two kinds of series:

- ``Meter``: a count and exponentially weighted moving averages of its rate, as Yammer's
  ``Meter`` (which Kafka exposes as ``Count``, ``MeanRate``, ``OneMinuteRate``,
  ``FiveMinuteRate``, ``FifteenMinuteRate``; rates are events per second).
- ``Gauge``: a callable sampled at scrape time.

Bounds: at most ``max_series`` series. A series asked for beyond the limit is not
registered: the caller gets a working but detached ``Meter`` (or ``Gauge``), the
``dropped_series`` count grows, and one warning is logged until the registry falls below the
limit again. ``remove_tagged("topic", t)`` drops every series of a deleted topic.

Thread-safety: the registry's map is guarded by a lock; meters are marked lock-free from any
thread (one cell per thread) and lock only to tick. Gauges are sampled
on the thread that renders the registry.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from storage_core.clock import SYSTEM_CLOCK, Clock

logger = logging.getLogger(__name__)

DEFAULT_MAX_SERIES = 10_000

# Yammer's EWMA: ticks every 5 s, alpha = 1 - exp(-tick / window).
TICK_INTERVAL_NS = 5_000_000_000
_TICK_INTERVAL_S = TICK_INTERVAL_NS / 1e9
M1_ALPHA = 1 - math.exp(-_TICK_INTERVAL_S / 60)
M5_ALPHA = 1 - math.exp(-_TICK_INTERVAL_S / 60 / 5)
M15_ALPHA = 1 - math.exp(-_TICK_INTERVAL_S / 60 / 15)

_TAG_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class InvalidMetricNameError(ValueError):
    """A metric name is malformed (empty part, bad tag key, repeated tag); fix the caller."""


class MetricTypeMismatchError(ValueError):
    """A series was asked for as a meter and as a gauge; give the two different names."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricName:
    """Kafka's Yammer metric name: ``group:type=T,name=N,tag1=v1,...`` (tags in given order)."""

    group: str
    type: str
    name: str
    tags: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.group or not self.type or not self.name:
            raise InvalidMetricNameError(
                f"metric name needs a group, a type and a name, got {self.mbean_name()!r}"
            )
        keys = [key for key, _ in self.tags]
        if len(set(keys)) != len(keys) or not all(_TAG_KEY.match(key) for key in keys):
            raise InvalidMetricNameError(
                f"metric tags must have distinct keys matching {_TAG_KEY.pattern},"
                f" got {keys} in {self.mbean_name()!r}"
            )

    def tag(self, key: str) -> str | None:
        for tag_key, value in self.tags:
            if tag_key == key:
                return value
        return None

    def mbean_name(self) -> str:
        tags = "".join(f",{key}={value}" for key, value in self.tags)
        return f"{self.group}:type={self.type},name={self.name}{tags}"


class Meter:
    """Yammer's ``Meter``: a count and 1/5/15-minute EWMA rates (events per second).

    Rates are updated in 5-second ticks, lazily, when the meter is marked or read; a long
    idle gap decays them in closed form. Before the first tick, rates are 0.0; the first
    tick sets them to that tick's instant rate.

    Marking is lock-free (as Yammer's ``LongAdder``): each thread adds to its own cell and
    the count is the sum of the cells; only a due tick (once per 5 s) takes the lock.
    """

    __slots__ = (
        "_cells",
        "_counted",
        "_initialized",
        "_last_tick_ns",
        "_local",
        "_lock",
        "_m1",
        "_m5",
        "_m15",
        "_nanoseconds",
        "_start_ns",
    )

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        # The system clock's method is a Python call around time.monotonic_ns; skip it.
        self._nanoseconds = time.monotonic_ns if clock is SYSTEM_CLOCK else clock.nanoseconds
        self._lock = threading.Lock()
        self._local = threading.local()
        self._cells: list[list[int]] = []  # one [count] per marking thread, written by it only
        self._counted = 0  # events already given to a tick
        self._m1 = 0.0
        self._m5 = 0.0
        self._m15 = 0.0
        self._initialized = False
        self._start_ns = self._nanoseconds()
        self._last_tick_ns = self._start_ns

    def mark(self, n: int = 1) -> None:
        if self._nanoseconds() - self._last_tick_ns >= TICK_INTERVAL_NS:
            self._tick_if_necessary()
        try:
            cell: list[int] = self._local.cell
        except AttributeError:
            cell = self._new_cell()
        cell[0] += n

    def _new_cell(self) -> list[int]:
        cell = [0]
        with self._lock:
            self._cells = [*self._cells, cell]  # readers iterate a list that never changes
        self._local.cell = cell
        return cell

    @property
    def count(self) -> int:
        return sum(cell[0] for cell in self._cells)

    def one_minute_rate(self) -> float:
        return self._rates()[0]

    def five_minute_rate(self) -> float:
        return self._rates()[1]

    def fifteen_minute_rate(self) -> float:
        return self._rates()[2]

    def mean_rate(self) -> float:
        elapsed_ns = self._nanoseconds() - self._start_ns
        return 0.0 if elapsed_ns <= 0 else self.count / (elapsed_ns / 1e9)

    def snapshot(self) -> tuple[int, float, float, float, float]:
        """``(count, mean rate, 1-, 5-, 15-minute rate)``, read together."""
        m1, m5, m15 = self._rates()
        return self.count, self.mean_rate(), m1, m5, m15

    def _rates(self) -> tuple[float, float, float]:
        self._tick_if_necessary()
        with self._lock:
            return self._m1, self._m5, self._m15

    def _tick_if_necessary(self) -> None:
        """Run the ticks due by now: the first with the events not yet given to a tick, the
        rest with none (a decay by ``(1 - alpha)`` each, computed at once)."""
        with self._lock:
            now_ns = self._nanoseconds()
            ticks = (now_ns - self._last_tick_ns) // TICK_INTERVAL_NS
            if ticks <= 0:
                return
            self._last_tick_ns += ticks * TICK_INTERVAL_NS
            total = self.count
            instant = (total - self._counted) / _TICK_INTERVAL_S
            self._counted = total
            if self._initialized:
                self._m1 += M1_ALPHA * (instant - self._m1)
                self._m5 += M5_ALPHA * (instant - self._m5)
                self._m15 += M15_ALPHA * (instant - self._m15)
            else:
                self._m1 = self._m5 = self._m15 = instant
                self._initialized = True
            idle = ticks - 1
            if idle > 0:
                self._m1 *= (1 - M1_ALPHA) ** idle
                self._m5 *= (1 - M5_ALPHA) ** idle
                self._m15 *= (1 - M15_ALPHA) ** idle


class Gauge:
    """A value read at scrape time from ``sample`` (Yammer's ``Gauge``, exposed as ``Value``)."""

    __slots__ = ("_sample",)

    def __init__(self, sample: Callable[[], float]) -> None:
        self._sample = sample

    def value(self) -> float:
        return float(self._sample())


Metric = Meter | Gauge


class KafkaMetricsRegistry:
    """Series by ``MetricName``, at most ``max_series`` of them (see the module docstring)."""

    def __init__(self, *, max_series: int = DEFAULT_MAX_SERIES, clock: Clock = SYSTEM_CLOCK):
        if max_series < 1:
            raise ValueError(f"max_series must be at least 1, got {max_series}")
        self.max_series = max_series
        self.clock = clock
        self._lock = threading.Lock()
        self._series: dict[MetricName, Metric] = {}
        self._dropped_series = 0
        self._warned_full = False

    def meter(self, name: MetricName) -> Meter:
        """The meter of ``name``, created on first use (detached beyond the series limit)."""
        existing = self._series.get(name)
        if isinstance(existing, Meter):
            return existing
        with self._lock:
            existing = self._series.get(name)
            if isinstance(existing, Meter):
                return existing
            if existing is not None:
                raise MetricTypeMismatchError(f"{name.mbean_name()} is a gauge, not a meter")
            meter = Meter(self.clock)
            self._maybe_register(name, meter)
            return meter

    def gauge(self, name: MetricName, sample: Callable[[], float]) -> Gauge:
        """Register (or replace) the gauge of ``name``, sampled by ``sample`` at scrape time."""
        gauge = Gauge(sample)
        with self._lock:
            existing = self._series.get(name)
            if isinstance(existing, Meter):
                raise MetricTypeMismatchError(f"{name.mbean_name()} is a meter, not a gauge")
            if existing is not None:
                self._series[name] = gauge
            else:
                self._maybe_register(name, gauge)
        return gauge

    def _maybe_register(self, name: MetricName, metric: Metric) -> None:
        """Add a new series (lock held) unless the registry is full."""
        if len(self._series) >= self.max_series:
            self._dropped_series += 1
            if not self._warned_full:
                self._warned_full = True
                logger.warning(
                    "metric series limit reached, new series are dropped max_series=%d"
                    " first_dropped=%s",
                    self.max_series,
                    name.mbean_name(),
                )
            return
        self._series[name] = metric

    def get(self, name: MetricName) -> Metric | None:
        return self._series.get(name)

    def remove(self, name: MetricName) -> bool:
        with self._lock:
            removed = self._series.pop(name, None) is not None
            self._maybe_rearm_warning()
            return removed

    def remove_tagged(self, key: str, value: str) -> int:
        """Remove every series tagged ``key=value`` (all series of a deleted topic)."""
        with self._lock:
            doomed = [name for name in self._series if name.tag(key) == value]
            for name in doomed:
                del self._series[name]
            self._maybe_rearm_warning()
            return len(doomed)

    def _maybe_rearm_warning(self) -> None:
        if len(self._series) < self.max_series:
            self._warned_full = False

    @property
    def dropped_series(self) -> int:
        """How many series were refused because of ``max_series`` (since start)."""
        return self._dropped_series

    def __len__(self) -> int:
        return len(self._series)

    def metrics(self) -> list[tuple[MetricName, Metric]]:
        """A snapshot of every series."""
        with self._lock:
            return list(self._series.items())
