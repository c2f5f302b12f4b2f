"""``free_port()``: a loopback TCP port for a server that another process will bind.

A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, the range it
also takes the local ports of outgoing connections from. Between choosing the port and the
server binding it (a broker or ZooKeeper process takes a second or more to start), any
connection opened on the machine can take that port, and the server fails with "Address
already in use". So the port is chosen at random below the ephemeral range, where no
outgoing connection goes, among the ports that nothing listens on now.

Two processes choosing at the same moment could still choose the same port, both finding it
free (with a few thousand servers started in a test run, that happened about once a run).
So each port handed out is written down in a registry shared by the machine's processes
(``storage-core-ports`` in the temp dir, locked while read and written) and not handed out
again for ``RESERVED_S``, long enough for its server to have bound it.
"""

from __future__ import annotations

import contextlib
import fcntl
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10_000  # above the ports well-known services listen on
DEFAULT_EPHEMERAL_LOW = 32_768  # Linux's default when the range cannot be read
ATTEMPTS = 100
RESERVED_S = 300.0
REGISTRY = Path(tempfile.gettempdir()) / "storage-core-ports"
_process_reservations: dict[int, float] = {}  # when the registry file cannot be used


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that binds now, lies below the kernel's ephemeral range and was
    not handed out in the last ``RESERVED_S``; the kernel's own choice when no such port is
    found."""
    high = _ephemeral_low() - 1
    rng = random.SystemRandom()  # independent of any seeded ``random`` a test uses
    if high > LOWEST_PORT:
        with _reservations() as reserved:
            for _ in range(ATTEMPTS):
                port = rng.randint(LOWEST_PORT, high)
                if port not in reserved and _binds(host, port):
                    reserved[port] = time.time()
                    return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _reservations() -> Iterator[dict[int, float]]:
    """The ports handed out recently (port -> when), under the registry's lock; what the
    caller adds is written back. The process's own memory when the file cannot be used."""
    with contextlib.ExitStack() as stack:
        try:
            registry = stack.enter_context(open(REGISTRY, "a+"))
        except OSError:
            yield _prevailing(_process_reservations)
            return
        fcntl.flock(registry, fcntl.LOCK_EX)
        registry.seek(0)
        reserved: dict[int, float] = {}
        for line in registry.read().splitlines():
            with contextlib.suppress(ValueError):
                port, when = line.split()
                reserved[int(port)] = float(when)
        reserved = _prevailing(reserved)
        yield reserved
        registry.seek(0)
        registry.truncate()
        registry.write("".join(f"{port} {when:.0f}\n" for port, when in reserved.items()))


def _prevailing(reserved: dict[int, float]) -> dict[int, float]:
    """``reserved`` without the reservations older than ``RESERVED_S`` (in place)."""
    horizon = time.time() - RESERVED_S
    for port in [port for port, when in reserved.items() if when < horizon]:
        del reserved[port]
    return reserved


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def _binds(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
