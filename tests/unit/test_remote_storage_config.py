"""Kafka's tiered-storage config rules, checked when topics are created or altered."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.log.log_config import LogConfig, validate_remote_storage
from storage_core.server.topic_store import TopicStore
from tests.single_node_support import single_node_store

DEFAULT = LogConfig()


@pytest.fixture
def _store(tmp_path: Path) -> Iterator[Callable[..., TopicStore]]:
    """Opens a single broker's topic store over the test's directory (a new one stops the
    previous: a restart)."""
    with ExitStack() as stack:
        current: list[ExitStack] = []

        def open_store(_path: Path, *, system_enabled: bool = True) -> TopicStore:
            for previous in current:
                previous.close()
            current.clear()
            inner = ExitStack()
            current.append(inner)
            stack.callback(inner.close)
            return inner.enter_context(
                single_node_store(tmp_path, remote_storage_system_enable=system_enabled)
            )

        yield open_store


def test_defaults_and_names_are_kafkas() -> None:
    config = DEFAULT.with_overrides(
        {"remote.storage.enable": "true", "remote.log.copy.disable": "true"}
    )
    assert config.remote_storage_enable and config.remote_log_copy_disable
    assert not config.remote_log_delete_on_disable
    assert (config.local_retention_ms, config.local_retention_bytes) == (-2, -2)
    props = config.to_props()
    assert props["remote.log.delete.on.disable"] == "false"
    assert props["remote.storage.enable"] == "true"


def test_the_broker_switch_must_be_on(tmp_path: Path, _store: Callable[..., TopicStore]) -> None:
    with pytest.raises(InvalidConfigError, match="disabled in the broker"):
        _store(tmp_path, system_enabled=False).create_topic(
            "t", 1, 1, {"remote.storage.enable": "true"}, DEFAULT
        )
    _store(tmp_path, system_enabled=False).create_topic("plain", 1, 1, {}, DEFAULT)


def test_compacted_topics_cannot_be_tiered(
    tmp_path: Path, _store: Callable[..., TopicStore]
) -> None:
    with pytest.raises(InvalidConfigError, match=r"cleanup\.policy=delete"):
        _store(tmp_path).create_topic(
            "t", 1, 1, {"remote.storage.enable": "true", "cleanup.policy": "compact"}, DEFAULT
        )


@pytest.mark.parametrize(
    ("configs", "named"),
    [
        ({"retention.ms": "1000", "local.retention.ms": "2000"}, r"local\.retention\.ms"),
        ({"retention.ms": "1000", "local.retention.ms": "-1"}, r"local\.retention\.ms"),
        ({"retention.bytes": "100", "local.retention.bytes": "200"}, r"local\.retention\.bytes"),
    ],
)
def test_local_retention_cannot_exceed_total_retention(
    tmp_path: Path, configs: dict[str, str], named: str, _store: Callable[..., TopicStore]
) -> None:
    with pytest.raises(InvalidConfigError, match=named):
        _store(tmp_path).create_topic(
            "t", 1, 1, {"remote.storage.enable": "true", **configs}, DEFAULT
        )


def test_local_retention_within_total_is_accepted(
    tmp_path: Path, _store: Callable[..., TopicStore]
) -> None:
    store = _store(tmp_path)
    store.create_topic(
        "t",
        1,
        1,
        {
            "remote.storage.enable": "true",
            "retention.ms": "-1",
            "local.retention.ms": "60000",
            "retention.bytes": "1000",
            "local.retention.bytes": "1000",
        },
        DEFAULT,
    )
    # Enabling on an existing topic is allowed, and so is the read-only mode.
    store.create_topic("later", 1, 1, {}, DEFAULT)
    store.alter_configs(
        "later", {"remote.storage.enable": "true"}, (), DEFAULT, validate_only=False
    )
    store.alter_configs(
        "later", {"remote.log.copy.disable": "true"}, (), DEFAULT, validate_only=False
    )


def test_disabling_needs_delete_on_disable(
    tmp_path: Path, _store: Callable[..., TopicStore]
) -> None:
    store = _store(tmp_path)
    store.create_topic("t", 1, 1, {"remote.storage.enable": "true"}, DEFAULT)
    with pytest.raises(InvalidConfigError, match=r"remote\.log\.delete\.on\.disable=true"):
        store.alter_configs(
            "t", {"remote.storage.enable": "false"}, (), DEFAULT, validate_only=False
        )
    with pytest.raises(InvalidConfigError, match="without deleting remote data"):
        store.alter_configs("t", {}, ("remote.storage.enable",), DEFAULT, validate_only=False)
    assert store.get("t").configs["remote.storage.enable"] == "true"  # type: ignore[union-attr]
    store.alter_configs(
        "t",
        {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"},
        (),
        DEFAULT,
        validate_only=False,
    )


def test_a_tiered_topic_stays_valid_when_the_broker_switch_goes_off() -> None:
    enabled = DEFAULT.with_overrides({"remote.storage.enable": "true"})
    validate_remote_storage(enabled, previous=enabled, system_enabled=False)
