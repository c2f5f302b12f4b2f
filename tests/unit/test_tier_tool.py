"""``storage-core tier``'s small decisions: RSM settings, broker id, output lines, progress."""

from __future__ import annotations

import io

import pytest

from storage_core.client.metadata import BrokerNode, ClusterMetadata
from storage_core.errors import InvalidConfigError
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tiered.operations import resolve_broker_id
from storage_core.tools.key_values import format_fields, rsm_settings
from storage_core.tools.tier_context import TierProgress


def broker_config(**props: str) -> KafkaConfig:
    return KafkaConfig.from_props({"log.dirs": "/tmp/unused", **props})


def cluster(*node_ids: int) -> ClusterMetadata:
    return ClusterMetadata(
        cluster_id=None,
        controller_id=node_ids[0],
        brokers=tuple(BrokerNode(node_id=n, host="127.0.0.1", port=9092 + n) for n in node_ids),
        topics=(),
    )


def test_rsm_settings_default_to_the_broker_config_and_the_command_line_wins() -> None:
    config = broker_config(
        **{
            "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
            "rsm.config.s3.bucket.name": "from-broker",
            "rsm.config.s3.region": "eu-west-1",
        }
    )
    name, settings = rsm_settings(config, None, ["s3.bucket.name=from-cli"])
    assert name == "S3RemoteStorageManager"
    assert settings == {
        "rsm.config.s3.bucket.name": "from-cli",
        "rsm.config.s3.region": "eu-west-1",
    }
    name, settings = rsm_settings(config, "LocalTieredStorage", ["rsm.config.local.storage.dir=/x"])
    assert name == "LocalTieredStorage"
    assert settings["rsm.config.local.storage.dir"] == "/x"


def test_rsm_settings_refuse_a_malformed_item() -> None:
    with pytest.raises(ValueError, match="--rsm-config expects KEY=VALUE"):
        rsm_settings(None, None, ["no-equals-sign"])


def test_broker_id_explicit_then_config_then_the_only_broker() -> None:
    assert resolve_broker_id(7, broker_config(**{"broker.id": "3"}), cluster(1, 2)) == 7
    assert resolve_broker_id(None, broker_config(**{"broker.id": "3"}), cluster(1, 2)) == 3
    assert resolve_broker_id(None, None, cluster(5)) == 5
    with pytest.raises(InvalidConfigError, match="pass --broker-id"):
        resolve_broker_id(None, None, cluster(1, 2))


def test_fields_are_key_value_with_quoted_text() -> None:
    line = format_fields({"partition": "orders-0", "finished": True, "error": 'a "b" c'})
    assert line == 'partition=orders-0 finished=true error="a \\"b\\" c"'
    assert format_fields({"offsets": "-", "empty": ""}) == 'offsets=- empty=""'


def test_progress_is_drawn_only_when_enabled() -> None:
    quiet = io.StringIO()
    bar = TierProgress(quiet, action="copy", total=4, enabled=False)
    bar.update(2, 100, force=True)
    bar.finish(4, 200)
    assert quiet.getvalue() == ""

    shown = io.StringIO()
    bar = TierProgress(shown, action="copy", total=4, enabled=True)
    bar.update(2, 100, force=True)
    bar.finish(4, 200)
    assert shown.getvalue().endswith("\rcopy [" + "#" * 30 + "] 4/4 segments 200 bytes\n")
