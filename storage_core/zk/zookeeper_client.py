"""``ZooKeeperClient``: one ZooKeeper session, the layer under ``KafkaZkClient`` (Kafka's
``kafka.zookeeper.ZooKeeperClient``): connecting within ``zookeeper.connection.timeout.ms``, the
chroot, the session's state changes (a lost session is an expired one: its ephemeral znodes are
gone), the watches' type and the heartbeat's health (``session_health``: the pings' round
trips). The znodes and what they hold are ``KafkaZkClient``'s.

``zookeeper.connect`` may end in a chroot (``127.0.0.1:2181/storage-core``), created on first
use as Kafka does. Thread-safety: kazoo's client is thread-safe; this class keeps no state but
the session it opened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, UnimplementedError
from kazoo.handlers.threading import KazooTimeoutError

from storage_core.errors import StorageError
from storage_core.zk import multi_read
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.session_health import SessionHealth
from storage_core.zk.zk_acls import SecureAclKazooClient, ZkSaslLogin

Watch = Callable[[Any], None]  # called once with the ZooKeeper event that fired it


class ZooKeeperConnectionError(StorageError):
    """ZooKeeper could not be reached, or the session could not be opened in time."""


def split_chroot(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/chroot"`` -> ``("h1:2181,h2:2181", "/chroot")``; chroot "" if none."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise ZooKeeperConnectionError(f"zookeeper.connect={connect!r} names no server")
    chroot = f"/{chroot}".rstrip("/") if slash else ""
    return hosts, chroot


class ZooKeeperClient:
    """One ZooKeeper session: a kazoo client to ``zookeeper.connect`` (its chroot created on
    start), or a client with kazoo's API on the single-node store."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int = 18_000,
        session: Any = None,
        sasl_login: ZkSaslLogin | None = None,
        set_acl: bool = False,
    ) -> None:
        """``session``: a client with kazoo's API other than a ZooKeeper connection (the
        single-node store's, see ``single_node``); by default a kazoo session to ``connect``,
        authenticated with ``sasl_login`` if given, creating znodes with Kafka's secure ACLs
        when ``set_acl`` (``zookeeper.set.acl``, see zk_acls)."""
        self.connect = connect
        self._sasl_options = sasl_login.sasl_options() if sasl_login is not None else None
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        # the heartbeat's round trips (none on the single-node store, which has no session
        # to lose)
        self.session_health = SessionHealth(session_timeout_ms=session_timeout_ms, name=connect)
        self._multi_read = True  # until a server answers that it has no multiRead
        if session is not None:
            self.hosts, self.chroot = connect, ""
            self.zk: Any = session
            return
        self.hosts, self.chroot = split_chroot(connect)
        client_class = SecureAclKazooClient if set_acl else KazooClient
        self.zk = client_class(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "max_delay": 1.0},
            command_retry={"max_tries": 3, "max_delay": 1.0},
            sasl_options=self._sasl_options,
        )
        self.session_health.install(self.zk)
        self._client_class = client_class

    @classmethod
    def single_node(cls, tree: LocalZNodeTree) -> Self:
        """A session on the single-node store of a broker without ``zookeeper.connect``."""
        return cls(f"single-node store {tree.location}", session=tree.session())

    def start(self) -> Self:
        """Create the chroot if there is one, then open the session (bounded by
        ``zookeeper.connection.timeout.ms``)."""
        if self.chroot:
            self._ensure_chroot()
        self._start(self.zk)
        return self

    def _start(self, client: Any) -> None:
        try:
            client.start(timeout=self.connection_timeout_ms / 1000)
        except KazooTimeoutError:
            client.stop()
            client.close()
            raise ZooKeeperConnectionError(
                f"could not connect to ZooKeeper at zookeeper.connect={self.connect} within "
                f"zookeeper.connection.timeout.ms={self.connection_timeout_ms}"
            ) from None
        if self._sasl_options is not None:
            self._check_sasl_login(client, self._sasl_options["username"])

    def _check_sasl_login(self, client: Any, username: str) -> None:
        """kazoo reports a session connected before its SASL login is done; a refused login
        closes it right after. One read tells which, so that a wrong password stops the start
        with its cause instead of a lost connection later."""
        try:
            client.exists("/")
        except KazooException as error:
            client.stop()
            client.close()
            raise ZooKeeperConnectionError(
                f"ZooKeeper at zookeeper.connect={self.connect} closed the session of the SASL"
                f" login of user {username!r} ({type(error).__name__}):"
                " check the username and password of the JAAS file's Client section and the"
                " users of ZooKeeper's Server section"
            ) from None

    def _ensure_chroot(self) -> None:
        root = self._client_class(
            hosts=self.hosts,
            timeout=self.session_timeout_ms / 1000,
            sasl_options=self._sasl_options,
        )
        self._start(root)
        try:
            root.ensure_path(self.chroot)
        finally:
            root.stop()
            root.close()

    def get_data_many(self, paths: Sequence[str]) -> list[Any]:
        """Each path's ``(data, stat)``, or ``NoNodeError`` where it does not exist: multiRead
        requests of many paths each (``multi_read``), or single reads, pipelined, where the
        session or the server has no multiRead."""
        if self._multi_read and multi_read.supports_multi_read(self.zk):
            try:
                return multi_read.multi_read(self.zk, paths)
            except UnimplementedError:
                self._multi_read = False  # a server before 3.6: single reads from now on
        return multi_read.single_reads(self.zk, paths)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    @property
    def session_id(self) -> int:
        session = self.zk.client_id
        return int(session[0]) if session else 0

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(state)`` on every session state change: "CONNECTED", "SUSPENDED" (the
        connection is lost, the session may survive) or "LOST" (the session expired: its
        ephemeral znodes are gone). Called on the client's thread: hand work off quickly."""
        add = getattr(self.zk, "add_listener", None)
        if add is not None:
            add(lambda state: listener(str(state)))
