"""Where each broker keeps its partitions: the broker id -> log dirs map a job reads a
partition's segments through (from the directories of the broker that leads it).

Written as ``ID=DIR[,DIR...]``, once per broker on the command line (``--broker-log-dirs``)
and ``;``-separated in the environment (``STORAGE_CORE_BROKER_LOG_DIRS``), e.g.
``1=/data/b1;2=/data/b2a,/data/b2b``. The directories must be the brokers' ``log.dirs`` as
this host sees them (a read-only mount is enough).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

BrokerLogDirs = Mapping[int, tuple[Path, ...]]


class BrokerLogDirsError(ValueError):
    """A broker log dirs entry is malformed; the message names the entry."""


def parse_broker_log_dirs(entries: Iterable[str], *, source: str) -> dict[int, tuple[Path, ...]]:
    """``{broker_id: (dir, ...)}`` from ``ID=DIR[,DIR...]`` entries (``source`` names where
    they came from in the error)."""
    parsed: dict[int, tuple[Path, ...]] = {}
    for entry in entries:
        text = entry.strip()
        if not text:
            continue
        broker, sep, dirs = text.partition("=")
        if not sep or not broker.strip().isdigit():
            raise BrokerLogDirsError(
                f"{source}: {text!r} is not ID=DIR[,DIR...] (a broker id, '=', its log dirs)"
            )
        broker_id = int(broker)
        paths = tuple(Path(d.strip()) for d in dirs.split(",") if d.strip())
        if not paths:
            raise BrokerLogDirsError(f"{source}: broker {broker_id} has no log dir in {text!r}")
        if broker_id in parsed:
            raise BrokerLogDirsError(f"{source}: broker {broker_id} is given twice")
        parsed[broker_id] = paths
    return parsed


def parse_broker_log_dirs_env(value: str, *, source: str) -> dict[int, tuple[Path, ...]]:
    """The environment's form: entries separated by ``;``."""
    return parse_broker_log_dirs(value.split(";"), source=source)


def format_broker_log_dirs(broker_log_dirs: BrokerLogDirs) -> str:
    """The environment's form of a map (what ``parse_broker_log_dirs_env`` reads back)."""
    return ";".join(
        f"{broker_id}=" + ",".join(str(d) for d in dirs)
        for broker_id, dirs in sorted(broker_log_dirs.items())
    )
