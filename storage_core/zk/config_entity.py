"""Config entities in ZooKeeper as Kafka's ZooKeeper mode keeps them (``ZkData.scala``:
``ConfigEntityZNode``, ``ConfigEntityChangeNotificationZNode``,
``ConfigEntityChangeNotificationSequenceZNode``; ``AdminZkClient.changeConfigs``), here for the
users' SCRAM credentials, and the listener of their change notifications (Kafka's
``ZkNodeChangeNotificationListener``)::

    /config/users/<sanitized user>       {"version":1,"config":{
                                           "SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,
                                                            server_key=<b64>,iterations=4096",
                                           "SCRAM-SHA-512":"..."}}
    /config/changes/config_change_<10 digits>   {"version":2,"entity_path":"users/<sanitized>"}

A user's name is sanitized as Kafka's ``Sanitizer`` does (``security.sanitizer``). A change to
an entity writes its znode (conditionally on the version read, so that two brokers changing
one user at once never lose either change), then a persistent sequential notification naming
it. Every broker watches ``/config/changes``, re-reads each entity a newer notification names,
and deletes notifications older than 15 minutes (``changeExpirationMs``), as Kafka does. An
entity whose config becomes empty is deleted. Version 1 notifications
(``{"version":1,"entity_type":"users","entity_name":"x"}``) are read too.

Works over a kazoo client or the single-node store's session (same calls). Thread-safety:
``ConfigEntityZkStore`` keeps no state; ``ConfigChangeListener`` runs its handler on one thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from storage_core.zk.zk_data import ZNodeDataError

logger = logging.getLogger(__name__)

CONFIG_PATH = "/config"
CONFIG_USERS_PATH = "/config/users"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
USERS_ENTITY_TYPE = "users"
CONFIG_ENTITY_VERSION = 1
CHANGE_NOTIFICATION_VERSION = 2
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's ZkNodeChangeNotificationListener default
MAX_CONFLICT_RETRIES = 50  # concurrent writers of one entity: each retry re-reads it
MAX_NOTIFICATIONS_PER_PASS = 100_000


def user_config_path(sanitized_user: str) -> str:
    return f"{CONFIG_USERS_PATH}/{sanitized_user}"


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    return json.dumps(
        {"version": CONFIG_ENTITY_VERSION, "config": dict(sorted(config.items()))},
        separators=(",", ":"),
    ).encode()


def decode_entity_config(path: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    try:
        document = json.loads(data)
    except ValueError as error:
        raise ZNodeDataError(f"{path} does not hold JSON: {error}") from error
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in config.items()
    ):
        raise ZNodeDataError(f'{path} holds no "config" object of strings')
    return dict(config)


def encode_change_notification(entity_type: str, sanitized_name: str) -> bytes:
    return json.dumps(
        {"version": CHANGE_NOTIFICATION_VERSION, "entity_path": f"{entity_type}/{sanitized_name}"},
        separators=(",", ":"),
    ).encode()


def decode_change_notification(path: str, data: bytes | None) -> tuple[str, str]:
    """(entity type, sanitized entity name) a notification names."""
    try:
        document = json.loads(data or b"")
    except ValueError as error:
        raise ZNodeDataError(f"{path} does not hold JSON: {error}") from error
    if not isinstance(document, dict):
        raise ZNodeDataError(f"{path} does not hold a JSON object")
    if document.get("version") == 1:
        entity_type, name = document.get("entity_type"), document.get("entity_name")
    else:
        entity_path = document.get("entity_path")
        if not isinstance(entity_path, str) or "/" not in entity_path:
            raise ZNodeDataError(f'{path} names no "entity_path" <type>/<name>')
        entity_type, _sep, name = entity_path.partition("/")
    if not isinstance(entity_type, str) or not isinstance(name, str) or not name:
        raise ZNodeDataError(f"{path} names no entity")
    return entity_type, name


class ConfigEntityZkStore:
    """Reads and writes users' config entities and their change notifications."""

    def __init__(self, session: Any) -> None:
        self._zk = session

    def create_paths(self) -> None:
        for path in (CONFIG_USERS_PATH, CONFIG_CHANGES_PATH):
            self._zk.ensure_path(path)

    def get_user_config(self, sanitized_user: str) -> dict[str, str]:
        path = user_config_path(sanitized_user)
        try:
            data, _stat = self._zk.get(path)
        except NoNodeError:
            return {}
        return decode_entity_config(path, data)

    def get_all_users(self) -> list[str]:
        """Sanitized names of the users with a config entity."""
        try:
            return sorted(self._zk.get_children(CONFIG_USERS_PATH))
        except NoNodeError:
            return []

    def change_user_config(
        self, sanitized_user: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Apply ``change`` to the user's config as it is (conditional on the version read,
        re-read and retried on a concurrent change), then notify every broker. Returns the
        config written ({} once deleted)."""
        self.create_paths()
        path = user_config_path(sanitized_user)
        for _attempt in range(MAX_CONFLICT_RETRIES):
            try:
                data, stat = self._zk.get(path)
                current, version = decode_entity_config(path, data), int(stat.version)
            except NoNodeError:
                current, version = {}, -1
            updated = change(dict(current))
            if updated == current and version >= 0:
                return updated
            try:
                if version < 0:
                    if not updated:
                        return updated
                    self._zk.create(path, encode_entity_config(updated))
                elif updated:
                    self._zk.set(path, encode_entity_config(updated), version=version)
                else:
                    self._zk.delete(path, version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker changed it meanwhile: read it again
            self._zk.create(
                f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}",
                encode_change_notification(USERS_ENTITY_TYPE, sanitized_user),
                sequence=True,
            )
            return updated
        raise ZNodeDataError(
            f"{path} changed under every one of {MAX_CONFLICT_RETRIES} attempts; try again"
        )


def _sequence_number(child: str) -> int:
    try:
        return int(child[len(CONFIG_CHANGE_PREFIX) :])
    except ValueError:
        return -1


class ConfigChangeListener:
    """Watches ``/config/changes`` and calls ``handler(entity_type, sanitized_name)`` for each
    notification newer than the last processed, on its own thread; deletes notifications older
    than ``change_expiration_ms`` (Kafka's ``ZkNodeChangeNotificationListener``)."""

    def __init__(
        self,
        session: Any,
        handler: Callable[[str, str], None],
        *,
        change_expiration_ms: int = CHANGE_EXPIRATION_MS,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._zk = session
        self._handler = handler
        self._change_expiration_ms = change_expiration_ms
        self._clock_ms = clock_ms
        self._last_executed_change = -1
        self._wakeup = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"{CONFIG_CHANGES_PATH}-event-process-thread", daemon=True
        )

    def start(self) -> None:
        """Skip the notifications already there (the caller loads every entity first), then
        process every later one."""
        self._zk.ensure_path(CONFIG_CHANGES_PATH)
        existing = [_sequence_number(c) for c in self._zk.get_children(CONFIG_CHANGES_PATH)]
        self._last_executed_change = max(existing, default=-1)
        # A new session has no watches: read the changes again once connected (Kafka's
        # ZkStateChangeHandler.afterInitializingSession); what was processed is not again.
        add_listener = getattr(self._zk, "add_listener", None)
        if add_listener is not None:
            add_listener(self._on_session_state)
        self._wakeup.set()
        self._thread.start()

    def _on_session_state(self, state: Any) -> None:
        if str(state) == "CONNECTED":
            self._wakeup.set()

    def close(self) -> None:
        self._closed.set()
        self._wakeup.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _watch(self, _event: Any) -> None:
        self._wakeup.set()

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wakeup.wait()
            self._wakeup.clear()
            if self._closed.is_set():
                return
            try:
                self.process_notifications()
            except Exception:
                logger.exception(
                    "Error while processing notification change for path = %s; retrying",
                    CONFIG_CHANGES_PATH,
                )
                self._closed.wait(1.0)
                self._wakeup.set()

    def process_notifications(self) -> None:
        children = sorted(self._zk.get_children(CONFIG_CHANGES_PATH, watch=self._watch))
        now_ms = self._clock_ms()
        for child in children[:MAX_NOTIFICATIONS_PER_PASS]:
            number = _sequence_number(child)
            if number <= self._last_executed_change:
                continue
            path = f"{CONFIG_CHANGES_PATH}/{child}"
            try:
                data, _stat = self._zk.get(path)
                entity_type, name = decode_change_notification(path, data)
                self._handler(entity_type, name)
            except NoNodeError:
                pass  # purged meanwhile
            except ZNodeDataError:
                logger.exception("error processing change notification from %s", path)
            self._last_executed_change = number
        for child in children:
            path = f"{CONFIG_CHANGES_PATH}/{child}"
            with contextlib.suppress(NoNodeError):
                _data, stat = self._zk.get(path)
                if now_ms - int(stat.ctime) > self._change_expiration_ms:
                    logger.debug("Purging change notification %s", path)
                    self._zk.delete(path)
