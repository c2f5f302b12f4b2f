"""A broker with tiered storage refuses ``rsm.config.*`` settings its remote storage manager
does not read, rather than ignore them: ``rsm.config.encryption.enabled=true`` on a manager
without encryption used to start and write plaintext objects. Encryption asked for without a
usable key ring stops it too: it never copies in plaintext instead.

The real ``storage-core broker`` command is started each time: with an unknown key it must
exit non-zero before listening, with one ``error:`` line naming the key; with known keys only
it starts. Both built-in managers (LocalTieredStorage, S3RemoteStorageManager: built without
reaching the store) are checked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.test_security_refusal import _listening, _start

pytestmark = pytest.mark.timeout(120)


Settings = Callable[[Path], dict[str, str]]


def local_settings(tmp_path: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(tmp_path / "remote"),
    }


def s3_settings(_tmp_path: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
        "rsm.config.s3.bucket.name": "tier",
        "rsm.config.s3.endpoint.url": "http://127.0.0.1:9",
        "rsm.config.s3.region": "us-east-1",
    }


@pytest.mark.parametrize("settings", [local_settings, s3_settings], ids=["local", "s3"])
@pytest.mark.parametrize(
    "unknown",
    [
        {"rsm.config.encryption.key.size": "256"},
        {"rsm.config.encryption.key.size": "256", "rsm.config.s3.sse": "aws:kms"},
        {"rsm.config.local.storage.directory": "/elsewhere"},  # a misspelt key
    ],
    ids=["encryption", "two", "misspelt"],
)
def test_an_unknown_rsm_config_key_stops_the_broker_with_one_line_naming_it(
    tmp_path: Path, settings: Settings, unknown: dict[str, str]
) -> None:
    code, errors, port = _start(tmp_path, {**settings(tmp_path), **unknown})

    assert code != 0
    assert len(errors) == 1, errors
    for key in unknown:
        assert key in errors[0]
    assert "does not know" in errors[0]
    assert not _listening(port)


@pytest.mark.parametrize("settings", [local_settings, s3_settings], ids=["local", "s3"])
def test_encryption_without_a_key_ring_stops_the_broker_naming_the_setting(
    tmp_path: Path, settings: Settings
) -> None:
    code, errors, port = _start(
        tmp_path, {**settings(tmp_path), "rsm.config.encryption.enabled": "true"}
    )

    assert code != 0
    assert len(errors) == 1, errors
    assert "rsm.config.encryption.enabled=true needs a key ring" in errors[0]
    assert not _listening(port)


@pytest.mark.parametrize(
    ("settings", "known"),
    [
        (local_settings, {"rsm.config.local.fsync": "false", "rsm.config.local.key.prefix": "c"}),
        (s3_settings, {"rsm.config.s3.retry.max.attempts": "2", "s3.key.prefix": "c"}),
    ],
    ids=["local", "s3"],
)
def test_known_rsm_config_keys_start(
    tmp_path: Path, settings: Settings, known: dict[str, str]
) -> None:
    overrides = {**settings(tmp_path), **{k: v for k, v in known.items() if k.startswith("rsm.")}}
    with BrokerProcess(tmp_path / "broker", overrides=overrides) as broker:
        assert _listening(broker.port)
        assert "does not know" not in broker.output()
