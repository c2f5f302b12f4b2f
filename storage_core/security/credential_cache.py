"""The SCRAM credentials a broker authenticates against (Kafka's ``CredentialCache`` and
``CredentialProvider``), loaded from the users' config entities at start
(``/config/users/<sanitized>``) and refreshed from their change notifications
(``/config/changes``), so that a credential added, changed or deleted through any broker takes
effect on every broker within moments (``zk.config_entity``).

    user config entity {"SCRAM-SHA-256": "salt=..,stored_key=..", ...}
        -> cache[SCRAM-SHA-256][user] = ScramCredential(...)   (a mechanism absent: removed)

A credential that does not parse is logged (user and mechanism, never its text) and left out,
as Kafka's ``ScramCredentialUtils`` refuses it. Thread-safety: the listener's thread writes,
connections' tasks read; one lock around the maps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from storage_core.security.sanitizer import desanitize
from storage_core.security.scram.scram_credential import (
    InvalidScramCredentialError,
    ScramCredential,
    credential_from_string,
)
from storage_core.security.scram.scram_mechanism import ScramMechanism
from storage_core.zk.config_entity import (
    USERS_ENTITY_TYPE,
    ConfigChangeListener,
    ConfigEntityZkStore,
)

logger = logging.getLogger(__name__)


class CredentialCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credentials: dict[ScramMechanism, dict[str, ScramCredential]] = {
            m: {} for m in ScramMechanism
        }

    def get(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        with self._lock:
            return self._credentials[mechanism].get(username)

    def update_credentials(self, username: str, config: Mapping[str, str]) -> None:
        """The user's SCRAM credentials are those of ``config`` (its entity's config)."""
        with self._lock:
            for mechanism in ScramMechanism:
                text = config.get(mechanism.mechanism_name)
                if text is None:
                    self._credentials[mechanism].pop(username, None)
                    continue
                try:
                    self._credentials[mechanism][username] = credential_from_string(text)
                except InvalidScramCredentialError as error:
                    self._credentials[mechanism].pop(username, None)
                    logger.warning(
                        "ignoring an invalid SCRAM credential user=%s mechanism=%s reason=%s",
                        username,
                        mechanism.mechanism_name,
                        error,
                    )

    def users(self) -> set[str]:
        with self._lock:
            return {u for by_user in self._credentials.values() for u in by_user}


class CredentialProvider:
    """Keeps a ``CredentialCache`` in step with ZooKeeper (or the single-node store)."""

    def __init__(self, session: Any, cache: CredentialCache | None = None) -> None:
        self.cache = cache if cache is not None else CredentialCache()
        self._store = ConfigEntityZkStore(session)
        self._listener = ConfigChangeListener(session, self._on_change)

    @property
    def store(self) -> ConfigEntityZkStore:
        """The users' config entities (what DescribeUserScramCredentials and
        AlterUserScramCredentials read and write)."""
        return self._store

    def start(self) -> None:
        self._store.create_paths()
        self._listener.start()  # notifications from now on are seen; earlier ones: loaded here
        for sanitized in self._store.get_all_users():
            self._refresh_user(sanitized)
        logger.info("SCRAM credentials loaded users=%d", len(self.cache.users()))

    def close(self) -> None:
        self._listener.close()

    def _on_change(self, entity_type: str, sanitized_name: str) -> None:
        if entity_type == USERS_ENTITY_TYPE:
            self._refresh_user(sanitized_name)

    def _refresh_user(self, sanitized_name: str) -> None:
        self.cache.update_credentials(
            desanitize(sanitized_name), self._store.get_user_config(sanitized_name)
        )
