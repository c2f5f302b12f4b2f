"""Apache ZooKeeper for the embedded default and the tests: one server, or an ensemble.

The brokers of a cluster agree through ZooKeeper (Kafka's ZooKeeper mode), and the project
does not bring a server of its own: the pyspark wheel that the pipeline installs already ships
``zookeeper-<version>.jar`` with its dependencies (netty, log4j, slf4j), so only a Java runtime
is needed. The jars are located through the package's import spec, without importing pyspark.

Each server is ``QuorumPeerMain <dir>/zoo.cfg`` in its own process group: with no ``server.N``
lines it runs standalone; with them it joins the ensemble as ``myid`` says. The admin server
(which would take port 8080) is off and ``srvr``/``ruok``/``mntr`` are allowed, so readiness and
each server's mode (standalone, leader, follower) are read over the client port.

    with ZooKeeperEnsemble(path, size=3) as zk:
        zk.connect_string            # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        zk.servers[0].kill()         # SIGKILL one server; a majority keeps serving
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from embedded.ports import free_port
from embedded.processes import ProcessGroup

ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
START_TIMEOUT_S = 30.0
# A short tick keeps leader elections and session expiry quick on loopback. Sessions are
# negotiated between 2 and 20 ticks, so brokers may ask for 1-10 s.
TICK_TIME_MS = 500
JAVA_HEAP = "-Xmx128m"
_FOUR_LETTER_TIMEOUT_S = 2.0
_POLL_S = 0.2


class ZooKeeperUnavailableError(RuntimeError):
    """ZooKeeper cannot be started here (no Java, no jars) or did not start in time."""


def zookeeper_classpath() -> str:
    """``<pyspark>/jars/*``: ZooKeeper and what it needs, as the pyspark wheel ships them."""
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        jars = Path(location) / "jars"
        if any(jars.glob("zookeeper-[0-9]*.jar")):
            return f"{jars}/*"
    raise ZooKeeperUnavailableError(
        "no zookeeper-*.jar found: install the pipeline extra (pyspark ships ZooKeeper), "
        "e.g. `make demo` or `pip install -e '.[pipeline]'`"
    )


def java_executable() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperUnavailableError("no `java` on PATH: ZooKeeper needs a Java 17+ runtime")
    return java


def four_letter_word(port: int, word: str, *, host: str = "127.0.0.1") -> str:
    """ZooKeeper's answer to a four-letter command (``srvr``, ``ruok``, ``mntr``); "" when the
    server does not answer."""
    try:
        with socket.create_connection((host, port), timeout=_FOUR_LETTER_TIMEOUT_S) as s:
            s.sendall(word.encode("ascii"))
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode("utf-8", errors="replace")


def server_mode(port: int) -> str | None:
    """``standalone``, ``leader`` or ``follower`` once the server serves clients, else None
    (a member of an ensemble without a quorum answers that it is not serving)."""
    for line in four_letter_word(port, "srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerPorts:
    """The ports of one ensemble member: clients, followers to the leader, leader election."""

    client: int
    quorum: int
    election: int


class ZooKeeperServer:
    """One ZooKeeper server process; its data, ``zoo.cfg`` and log under ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        my_id: int,
        ports: PeerPorts,
        peers: dict[int, PeerPorts],
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.sasl_users = dict(sasl_users or {})
        self.my_id = my_id
        self.ports = ports
        self.peers = peers  # empty for a standalone server
        self.data_dir = directory / "data"
        self.config_path = directory / "zoo.cfg"
        self.jaas_path = directory / "zookeeper-jaas.conf"
        self.log_path = directory / "zookeeper.log"
        self.process: ProcessGroup | None = None

    @property
    def client_port(self) -> int:
        return self.ports.client

    def write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={TICK_TIME_MS}",
            "initLimit=20",
            "syncLimit=10",
            f"dataDir={self.data_dir}",
            f"clientPort={self.ports.client}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,mntr",
            "maxClientCnxns=0",
        ]
        if self.sasl_users:
            # Clients must authenticate (SASL DIGEST-MD5 against the users of the JAAS file)
            # before any other operation: ZooKeeper 3.7's enforce.auth.
            lines += [
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
                "enforce.auth.enabled=true",
                "enforce.auth.schemes=sasl",
            ]
            write_private_file(self.jaas_path, server_jaas_config(self.sasl_users))
        if self.peers:
            (self.data_dir / "myid").write_text(f"{self.my_id}\n")
            lines += [
                f"server.{peer_id}=127.0.0.1:{p.quorum}:{p.election}"
                for peer_id, p in sorted(self.peers.items())
            ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> ZooKeeperServer:
        self.write_config()
        command = [
            java_executable(),
            JAVA_HEAP,
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            *([f"-Djava.security.auth.login.config={self.jaas_path}"] if self.sasl_users else []),
            "-cp",
            zookeeper_classpath(),
            ZOOKEEPER_MAIN,
            str(self.config_path),
        ]
        self.process = ProcessGroup(
            f"zookeeper-{self.my_id}", command, log_path=self.log_path, cwd=self.directory
        ).start()
        return self

    def is_running(self) -> bool:
        return self.process is not None and self.process.exit_code() is None

    def mode(self) -> str | None:
        return server_mode(self.ports.client) if self.is_running() else None

    def kill(self) -> None:
        """SIGKILL, as a crash: no clean shutdown."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_s=10.0)

    def failure(self) -> str:
        tail = self.process.tail(2000) if self.process is not None else ""
        return f"zookeeper server {self.my_id} (client port {self.ports.client}); log:\n{tail}"


def server_jaas_config(users: Mapping[str, str]) -> str:
    """The ``Server`` section of a ZooKeeper JAAS file: the users that may authenticate with
    SASL DIGEST-MD5 (``user_<name>="<password>"``)."""
    options = " ".join(f'user_{name}="{_jaas_quoted(pw)}"' for name, pw in users.items())
    return (
        "Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f"  {options};\n}};\n"
    )


def _jaas_quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def write_private_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (it holds passwords)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers on loopback (1 = standalone), started and stopped together.
    With ``sasl_users`` every client must authenticate as one of them (SASL DIGEST-MD5)."""

    def __init__(
        self, directory: Path, *, size: int = 1, sasl_users: Mapping[str, str] | None = None
    ) -> None:
        if size < 1:
            raise ValueError(f"a ZooKeeper ensemble needs at least one server, not {size}")
        self.directory = directory
        ports = {
            my_id: PeerPorts(client=free_port(), quorum=free_port(), election=free_port())
            for my_id in range(1, size + 1)
        }
        peers = ports if size > 1 else {}
        self.servers = [
            ZooKeeperServer(
                directory / f"zookeeper-{my_id}",
                my_id=my_id,
                ports=p,
                peers=peers,
                sasl_users=sasl_users,
            )
            for my_id, p in ports.items()
        ]

    @property
    def connect_string(self) -> str:
        """``host:port,...`` for ``zookeeper.connect`` (append ``/chroot`` as needed)."""
        return ",".join(f"127.0.0.1:{s.client_port}" for s in self.servers)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ZooKeeperEnsemble:
        for server in self.servers:
            server.start()
        try:
            self.wait_until_serving(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_until_serving(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every running server serves clients (an ensemble has elected its leader)."""
        deadline = time.monotonic() + timeout_s
        while True:
            exited = [s for s in self.servers if s.process is not None and not s.is_running()]
            if exited:
                raise ZooKeeperUnavailableError(f"exited at start: {exited[0].failure()}")
            running = [s for s in self.servers if s.is_running()]
            if running and all(s.mode() is not None for s in running):
                return
            if time.monotonic() > deadline:
                waiting = [s for s in running if s.mode() is None] or self.servers
                raise ZooKeeperUnavailableError(
                    f"not serving within {timeout_s:.0f} s: {waiting[0].failure()}"
                )
            time.sleep(_POLL_S)

    def leader(self) -> ZooKeeperServer | None:
        return next((s for s in self.servers if s.mode() in ("leader", "standalone")), None)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def __enter__(self) -> ZooKeeperEnsemble:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
