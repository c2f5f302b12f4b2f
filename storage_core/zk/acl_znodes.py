"""ACLs in ZooKeeper as Kafka's ZooKeeper mode keeps them (``ZkData.scala``: ``ZkAclStore``,
``ZkAclChangeStore``, ``ResourceZNode``; ``AclEntry`` for the JSON), and the listener of their
change notifications (Kafka's ``ZkNodeChangeNotificationListener``).

Paths (resource types in Pascal case: ``Topic``, ``Group``, ``Cluster``, ``TransactionalId``,
``DelegationToken``, ``User``; pattern types below ``/kafka-acl-extended`` in lower case)::

    /kafka-acl/<ResourceType>/<name>                     ACLs of a LITERAL pattern
    /kafka-acl-extended/prefixed/<ResourceType>/<name>   ACLs of a PREFIXED pattern
    /kafka-acl-changes/acl_changes_<10 digits>           a LITERAL pattern changed
    /kafka-acl-extended-changes/acl_changes_<10 digits>  a PREFIXED pattern changed

A resource znode holds its ACLs; it is written only conditionally on the version read (a
create that fails if it exists, a set or a delete at the version read), so that two brokers
changing one resource's ACLs at once never lose either change::

    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                          "operation":"Read","host":"*"}]}

A change notification is a persistent sequential znode; its data names the changed pattern:
``TOPIC:foo`` (the resource type's enum name, a colon, the name) under ``/kafka-acl-changes``,
and ``{"version":1,"resourceType":"TOPIC","name":"foo","patternType":"PREFIXED"}`` under
``/kafka-acl-extended-changes``. Every broker watches both paths and re-reads a changed
resource's znode; notifications older than 15 minutes are deleted by whichever broker sees them.

Works over a kazoo client or the single-node store's session (same calls).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from storage_core.protocol.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

logger = logging.getLogger(__name__)

LITERAL_ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
LITERAL_ACL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
SEQUENCE_NUMBER_PREFIX = "acl_changes_"
ACL_JSON_VERSION = 1
CHANGE_EVENT_VERSION = 1
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
UNKNOWN_VERSION = -2
"""``ZkVersion.UnknownVersion``: the resource has no znode."""
MAX_ACLS_PER_RESOURCE = 100_000
MAX_NOTIFICATIONS_PER_PASS = 10_000

ACL_PATHS = (
    LITERAL_ACL_PATH,
    LITERAL_ACL_CHANGES_PATH,
    f"{EXTENDED_ACL_PATH}/{PatternType.PREFIXED.name.lower()}",
    EXTENDED_ACL_CHANGES_PATH,
)
"""What ``createAclPaths`` makes: every store's ACL path and change path."""

STORED_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)


class AclZnodeError(ValueError):
    """A znode under the ACL paths holds data this broker cannot read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionedAcls:
    """A resource's ACLs and the version of its znode (``UNKNOWN_VERSION``: no znode)."""

    acls: frozenset[AccessControlEntry]
    zk_version: int

    @property
    def exists(self) -> bool:
        return self.zk_version != UNKNOWN_VERSION


NO_ACLS = VersionedAcls(acls=frozenset(), zk_version=UNKNOWN_VERSION)


def store_path(pattern_type: PatternType) -> str:
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_PATH
    if pattern_type == PatternType.PREFIXED:
        return f"{EXTENDED_ACL_PATH}/{pattern_type.name.lower()}"
    raise ValueError(f"no ACL store for pattern type {pattern_type.name}")


def change_path(pattern_type: PatternType) -> str:
    return (
        LITERAL_ACL_CHANGES_PATH
        if pattern_type == PatternType.LITERAL
        else (EXTENDED_ACL_CHANGES_PATH)
    )


def resource_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{store_path(pattern_type)}/{resource_type.pascal_name}"


def resource_path(pattern: ResourcePattern) -> str:
    return f"{resource_type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def encode_acls(acls: frozenset[AccessControlEntry] | set[AccessControlEntry]) -> bytes:
    entries = [
        {
            "principal": acl.principal,
            "permissionType": acl.permission_type.pascal_name,
            "operation": acl.operation.pascal_name,
            "host": acl.host,
        }
        for acl in sorted(acls, key=_entry_order)
    ]
    return json.dumps({"version": ACL_JSON_VERSION, "acls": entries}, separators=(",", ":")).encode(
        "utf-8"
    )


def _entry_order(acl: AccessControlEntry) -> tuple[str, int, int, str]:
    return (acl.principal, int(acl.permission_type), int(acl.operation), acl.host)


def decode_acls(path: str, data: bytes) -> frozenset[AccessControlEntry]:
    """``AclEntry.fromBytes``: empty data is no ACLs."""
    if not data:
        return frozenset()
    try:
        document = json.loads(data)
        if document.get("version") != ACL_JSON_VERSION:
            raise AclZnodeError(f"{path}: ACL version {document.get('version')!r} is not 1")
        raw = document["acls"]
        if len(raw) > MAX_ACLS_PER_RESOURCE:
            raise AclZnodeError(f"{path}: {len(raw)} ACLs exceed {MAX_ACLS_PER_RESOURCE}")
        acls = set()
        for item in raw:
            principal = str(item["principal"])
            if ":" not in principal:
                raise AclZnodeError(f"{path}: principal {principal!r} is not <type>:<name>")
            acls.add(
                AccessControlEntry(
                    principal=principal,
                    host=str(item["host"]),
                    operation=AclOperation.from_name(str(item["operation"])),
                    permission_type=AclPermissionType.from_name(str(item["permissionType"])),
                )
            )
        return frozenset(acls)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, AclZnodeError):
            raise
        raise AclZnodeError(f"{path}: unreadable ACLs: {exc}") from None


def encode_change(pattern: ResourcePattern) -> bytes:
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return json.dumps(
        {
            "version": CHANGE_EVENT_VERSION,
            "resourceType": pattern.resource_type.name,
            "name": pattern.name,
            "patternType": pattern.pattern_type.name,
        },
        separators=(",", ":"),
    ).encode("utf-8")


def decode_change(path: str, data: bytes) -> ResourcePattern:
    """A notification's pattern; ``path`` is its change path."""
    text = data.decode("utf-8", errors="replace")
    if path == LITERAL_ACL_CHANGES_PATH:
        type_name, sep, name = text.partition(":")
        if not sep:
            raise AclZnodeError(f"expected ResourceType:ResourceName but got {text!r}")
        return ResourcePattern(
            resource_type=ResourceType.from_name(type_name),
            name=name,
            pattern_type=PatternType.LITERAL,
        )
    try:
        event = json.loads(text)
        if int(event["version"]) > CHANGE_EVENT_VERSION:
            raise AclZnodeError(f"ACL change event of unsupported version {event['version']}")
        return ResourcePattern(
            resource_type=ResourceType.from_name(str(event["resourceType"])),
            name=str(event["name"]),
            pattern_type=PatternType.from_name(str(event["patternType"])),
        )
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, AclZnodeError):
            raise
        raise AclZnodeError(f"unreadable ACL change event {text!r}: {exc}") from None


class AclZkStore:
    """The ACL reads and writes of Kafka's ``KafkaZkClient``, over one session (kazoo's client
    or the single-node store's). Thread-safe as the session is."""

    def __init__(self, session: Any) -> None:
        self.zk = session

    def create_acl_paths(self) -> None:
        for path in ACL_PATHS:
            self.zk.ensure_path(path)

    def get_resource_types(self, pattern_type: PatternType) -> list[str]:
        try:
            return sorted(self.zk.get_children(store_path(pattern_type)))
        except NoNodeError:
            return []

    def get_resource_names(
        self, pattern_type: PatternType, resource_type: ResourceType
    ) -> list[str]:
        try:
            return sorted(self.zk.get_children(resource_type_path(pattern_type, resource_type)))
        except NoNodeError:
            return []

    def get_versioned_acls(self, pattern: ResourcePattern) -> VersionedAcls:
        path = resource_path(pattern)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return NO_ACLS
        return VersionedAcls(acls=decode_acls(path, data), zk_version=int(stat.version))

    def create_acls_if_not_exists(
        self, pattern: ResourcePattern, acls: frozenset[AccessControlEntry]
    ) -> tuple[bool, int]:
        """(True, 0) if created, (False, UNKNOWN_VERSION) if the znode exists."""
        path = resource_path(pattern)
        self.zk.ensure_path(path.rsplit("/", 1)[0])
        try:
            self.zk.create(path, encode_acls(acls))
        except NodeExistsError:
            return False, UNKNOWN_VERSION
        return True, 0

    def conditional_set_acls(
        self, pattern: ResourcePattern, acls: frozenset[AccessControlEntry], expected_version: int
    ) -> tuple[bool, int]:
        """(True, new version) or (False, UNKNOWN_VERSION) if the znode moved on or went."""
        try:
            stat = self.zk.set(resource_path(pattern), encode_acls(acls), version=expected_version)
        except (BadVersionError, NoNodeError):
            return False, UNKNOWN_VERSION
        return True, int(stat.version)

    def conditional_delete(self, pattern: ResourcePattern, expected_version: int) -> bool:
        """True if deleted or already gone; False if the znode moved on."""
        try:
            self.zk.delete(resource_path(pattern), version=expected_version)
        except NoNodeError:
            return True
        except BadVersionError:
            return False
        return True

    def create_change_notification(self, pattern: ResourcePattern) -> str:
        path = change_path(pattern.pattern_type)
        created: str = self.zk.create(
            f"{path}/{SEQUENCE_NUMBER_PREFIX}", encode_change(pattern), sequence=True
        )
        return created


def _sequence_number(child: str) -> int:
    suffix = child[len(SEQUENCE_NUMBER_PREFIX) :]
    return int(suffix) if child.startswith(SEQUENCE_NUMBER_PREFIX) and suffix.isdigit() else -1


class AclChangeListener:
    """Kafka's ``ZkNodeChangeNotificationListener`` on both ACL change paths: on start and on
    every change of their children (a watch, and a re-read every ``poll_interval_s`` in case a
    watch was lost with a session), hands each notification not seen before to ``on_change``
    in sequence order, then deletes notifications older than ``CHANGE_EXPIRATION_MS``.

    One daemon thread; ``on_change`` runs on it."""

    def __init__(
        self,
        store: AclZkStore,
        on_change: Callable[[ResourcePattern], None],
        *,
        poll_interval_s: float = 30.0,
        change_expiration_ms: int = CHANGE_EXPIRATION_MS,
    ) -> None:
        self._store = store
        self._on_change = on_change
        self._poll_interval_s = poll_interval_s
        self._change_expiration_ms = change_expiration_ms
        self._last_executed = {LITERAL_ACL_CHANGES_PATH: -1, EXTENDED_ACL_CHANGES_PATH: -1}
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Process what is there now (on the caller's thread), then listen. A session that
        reconnects (a new session after an expiry has lost every watch) wakes the listener, as
        Kafka's listener re-reads on a new session."""
        add_listener = getattr(self._store.zk, "add_listener", None)
        if add_listener is not None:
            add_listener(self._on_session_state)
        self.process_notifications()
        self._thread = threading.Thread(
            target=self._run, name="acl-change-notification-listener", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        remove_listener = getattr(self._store.zk, "remove_listener", None)
        if remove_listener is not None:
            remove_listener(self._on_session_state)
        self._closed.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self._poll_interval_s)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                self.process_notifications()
            except Exception:  # a lost session, a bad znode: the next wake or poll retries
                logger.exception("processing ACL change notifications failed; retrying later")

    def _watch(self, _event: Any) -> None:
        self._wake.set()

    def _on_session_state(self, state: Any) -> None:
        if str(state) == "CONNECTED":
            self._wake.set()

    def process_notifications(self) -> None:
        for path in (LITERAL_ACL_CHANGES_PATH, EXTENDED_ACL_CHANGES_PATH):
            try:
                children = self._store.zk.get_children(path, watch=self._watch)
            except NoNodeError:
                continue
            numbered = sorted((n, c) for c in children if (n := _sequence_number(c)) >= 0)[
                :MAX_NOTIFICATIONS_PER_PASS
            ]
            now_ms = int(time.time() * 1000)
            for number, child in numbered:
                node = f"{path}/{child}"
                try:
                    data, stat = self._store.zk.get(node)
                except NoNodeError:
                    continue  # purged by another broker
                if number > self._last_executed[path]:
                    try:
                        pattern = decode_change(path, data)
                    except (AclZnodeError, ValueError) as exc:
                        logger.warning(
                            "skipping unreadable ACL change notification %s: %s", node, exc
                        )
                    else:
                        self._on_change(pattern)
                    self._last_executed[path] = number
                if int(stat.ctime) + self._change_expiration_ms < now_ms:
                    with contextlib.suppress(NoNodeError):
                        self._store.zk.delete(node)
