"""The connection names the cluster: every broker as a bootstrap server and each broker's log
dirs, read through Airflow's own connection lookup, validated when read, and handed to the
jobs as options their own parser accepts (the one-broker connection as before)."""

from __future__ import annotations

import json
from typing import Any

import pytest

THREE_BROKERS = {
    "conn_type": "generic",
    "host": "b1:9092,b2:9093,b3",
    "port": 9094,
    "extra": {
        "broker_log_dirs": {"1": ["/data/b1"], "2": "/data/b2a, /data/b2b", "3": ["/data/b3"]},
        "remote_storage_manager": "LocalTieredStorage",
        "rsm_config": {"local.storage.dir": "/data/tier"},
    },
}


def job_args(argv: list[str]) -> Any:
    """What a job makes of these options (its own parser, as ``python -m jobs.<x>`` runs)."""
    from jobs.common import job_parser, parse_job_args

    return parse_job_args(job_parser("status", None), argv, job="status", environ={})


def test_a_three_broker_connection_reaches_every_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from tiered_storage_plugin.hooks import TieredStorageHook

    monkeypatch.setenv("AIRFLOW_CONN_TS_CLUSTER", json.dumps(THREE_BROKERS))
    settings = TieredStorageHook("ts_cluster").settings()
    assert settings.bootstrap_servers == ("b1:9092", "b2:9093", "b3:9094")
    argv = settings.job_arguments()
    assert argv[:2] == ["--bootstrap-server", "b1:9092,b2:9093,b3:9094"]
    assert "--log-dir" not in argv
    parsed = job_args(argv)
    assert parsed.bootstrap_server == "b1:9092,b2:9093,b3:9094"
    assert dict(parsed.broker_log_dirs) == {
        1: (Path("/data/b1"),),
        2: (Path("/data/b2a"), Path("/data/b2b")),
        3: (Path("/data/b3"),),
    }
    assert parsed.log_dirs_by_broker(None) == parsed.broker_log_dirs


def test_the_environment_form_of_the_map_is_read_too() -> None:
    from tiered_storage_plugin.hooks import ClusterSettings

    from jobs.common.broker_log_dirs import format_broker_log_dirs

    text = "1=/data/b1;2=/data/b2a,/data/b2b"
    settings = ClusterSettings.from_connection(
        host="b1:9092,b2:9092", port=None, extra={"broker_log_dirs": text}
    )
    assert settings.broker_log_dirs == {1: ("/data/b1",), 2: ("/data/b2a", "/data/b2b")}
    assert format_broker_log_dirs(settings.broker_log_dirs) == text


def test_the_single_broker_connection_still_works() -> None:
    from pathlib import Path

    from tiered_storage_plugin.hooks import ClusterSettings

    settings = ClusterSettings.from_connection(
        host="127.0.0.1", port=9092, extra={"log_dirs": ["/data/a"]}
    )
    assert settings.bootstrap_server == "127.0.0.1:9092"
    parsed = job_args([*settings.job_arguments(), "--broker-id", "1"])
    assert parsed.log_dirs == (Path("/data/a"),)
    assert dict(parsed.log_dirs_by_broker(parsed.broker_id)) == {1: (Path("/data/a"),)}


def test_the_copy_rate_of_the_connection_reaches_the_copy_job_only(tmp_path: Any) -> None:
    """extra.copy_max_bytes_per_second -> the copy job's --bytes-per-second (KIP-956's copy
    quota for the run); the other jobs do not take it."""
    from tiered_storage_plugin.hooks import ClusterSettings
    from tiered_storage_plugin.operators import TieringJobOperator

    settings = ClusterSettings.from_connection(
        host="b1:9092", port=None, extra={"copy_max_bytes_per_second": "8000"}
    )

    class Hook:
        def settings(self) -> ClusterSettings:
            return settings

    copy = TieringJobOperator(task_id="copy_segments", job="copy_segments")
    argv = copy.command(Hook(), tmp_path)  # type: ignore[arg-type]
    assert argv[argv.index("--bytes-per-second") + 1] == "8000.0"
    quality = TieringJobOperator(task_id="quality", job="quality")
    assert "--bytes-per-second" not in quality.command(Hook(), tmp_path)  # type: ignore[arg-type]
    without = ClusterSettings.from_connection(host="b1:9092", port=None, extra={})
    assert without.copy_max_bytes_per_second is None


@pytest.mark.parametrize(
    ("host", "port", "extra", "message"),
    [
        ("b1:9092,b2:x", None, {}, r"bootstrap server 'b2:x' .* is not HOST:PORT"),
        ("b1:9092,b2", None, {}, r"bootstrap server 'b2' has no port"),
        ("b1:70000", None, {}, r"'b1:70000' .* is not HOST:PORT"),
        (None, None, {"bootstrap_servers": 7}, r"'bootstrap_servers' must be a list"),
        ("h", 1, {"broker_log_dirs": {"one": ["/a"]}}, r"entry 'one' is not a broker id"),
        ("h", 1, {"broker_log_dirs": {"2": []}}, r"broker 2 has no log dir"),
        ("h", 1, {"broker_log_dirs": {"2": [5]}}, r"entry '2' must be a list of log dirs"),
        ("h", 1, {"broker_log_dirs": {"2": ["/a;b"]}}, r"broker 2: log dir '/a;b' holds"),
        ("h", 1, {"broker_log_dirs": "1=/a;2"}, r"'2' is not ID=DIR"),
        ("h", 1, {"broker_log_dirs": "1=/a;1=/b"}, r"broker 1 is given twice"),
        ("h", 1, {"broker_log_dirs": ["1=/a"]}, r"'broker_log_dirs' must be an object"),
        ("h", 1, {"copy_max_bytes_per_second": 0}, r"'copy_max_bytes_per_second' must be a"),
        ("h", 1, {"copy_max_bytes_per_second": "fast"}, r"bytes per second above 0, got 'fast'"),
        (
            "h",
            1,
            {"log_dirs": ["/a"], "broker_log_dirs": {"1": ["/a"]}},
            r"both extra 'log_dirs' .* and 'broker_log_dirs'",
        ),
    ],
)
def test_a_malformed_cluster_connection_is_refused_naming_the_entry(
    host: str | None, port: int | None, extra: dict[str, Any], message: str
) -> None:
    from tiered_storage_plugin.hooks import ClusterSettings, TieredStorageConnectionError

    with pytest.raises(TieredStorageConnectionError, match=message):
        ClusterSettings.from_connection(host=host, port=port, extra=extra)


def test_a_malformed_connection_fails_when_the_hook_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tiered_storage_plugin.hooks import TieredStorageConnectionError, TieredStorageHook

    bad = {**THREE_BROKERS, "extra": {"broker_log_dirs": {"1": ["/a"], "x2": ["/b"]}}}
    monkeypatch.setenv("AIRFLOW_CONN_TS_BAD", json.dumps(bad))
    with pytest.raises(TieredStorageConnectionError, match="entry 'x2' is not a broker id"):
        TieredStorageHook("ts_bad").settings()
