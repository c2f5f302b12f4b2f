"""``free_port()``: a loopback TCP port for a server that another process will bind.

A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, the range it
also takes the local ports of outgoing connections from. Between choosing the port and the
server binding it (a broker or ZooKeeper process takes a second or more to start), any
connection opened on the machine can take that port, and the server fails with "Address
already in use". So the port is chosen at random below the ephemeral range, where no
outgoing connection goes, among the ports that nothing listens on now.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10_000  # above the ports well-known services listen on
DEFAULT_EPHEMERAL_LOW = 32_768  # Linux's default when the range cannot be read
ATTEMPTS = 100


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that binds now and lies below the kernel's ephemeral range; the
    kernel's own choice when no such port is found."""
    high = _ephemeral_low() - 1
    rng = random.SystemRandom()  # independent of any seeded ``random`` a test uses
    if high > LOWEST_PORT:
        for _ in range(ATTEMPTS):
            port = rng.randint(LOWEST_PORT, high)
            if _binds(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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
