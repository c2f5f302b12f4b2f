"""The ACLs the brokers put on the znodes they create, as Kafka's ``ZkData.defaultAcls`` does
with ``zookeeper.set.acl=true``, and the SASL login a broker's ZooKeeper session uses.

    zookeeper.set.acl=false   every znode open to all (world:anyone ALL), Kafka's default
    zookeeper.set.acl=true    the creator (the broker's SASL identity, sasl:<user>) may do
                              everything; everyone else may only read, except below the
                              sensitive roots (SCRAM credentials under /config/users, broker
                              configs under /config/brokers, delegation tokens), which no one
                              else may even read

so that a client of ZooKeeper alone (a process that reaches its port without the brokers'
credentials) cannot rewrite the cluster's metadata or read its secrets. The ACLs only bind
authenticated sessions: the brokers log in with SASL DIGEST-MD5, as the ``Client`` section of
Kafka's JAAS file configures them (``security.zookeeper_login`` reads it).

A znode created with ACLs keeps them: turning ``zookeeper.set.acl`` on for an existing cluster
secures only the znodes created afterwards (Kafka's ``zookeeper-security-migration`` tool is
not provided). Thread-safety: pure functions and immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

# Kafka's ZkData.SensitiveRootPaths
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token")


@dataclass(frozen=True, slots=True)
class ZkSaslLogin:
    """The SASL DIGEST-MD5 identity of a broker's ZooKeeper session."""

    username: str
    password: str = field(repr=False)

    def sasl_options(self) -> dict[str, str]:
        """kazoo's ``sasl_options`` for this login."""
        return {"mechanism": "DIGEST-MD5", "username": self.username, "password": self.password}


def is_sensitive_path(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


def default_acls(path: str, *, secure: bool) -> list[Any]:
    """Kafka's ``ZkData.defaultAcls(isSecure, path)``."""
    if not secure:
        return list(OPEN_ACL_UNSAFE)
    if is_sensitive_path(path):
        return list(CREATOR_ALL_ACL)
    return list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)


class SecureAclKazooClient(KazooClient):  # type: ignore[misc]
    """A kazoo client that creates every znode (directly, through ``ensure_path`` and in
    transactions) with ``default_acls(path, secure=True)`` unless the caller names ACLs."""

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, **kwargs: Any) -> Any:
        return super().create_async(
            path, value, acl=acl or default_acls(path, secure=True), **kwargs
        )

    def transaction(self) -> TransactionRequest:
        return _SecureAclTransaction(self)


class _SecureAclTransaction(TransactionRequest):  # type: ignore[misc]
    def create(self, path: str, value: bytes = b"", acl: Any = None, **kwargs: Any) -> None:
        super().create(path, value, acl=acl or default_acls(path, secure=True), **kwargs)
