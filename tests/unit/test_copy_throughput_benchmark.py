"""The cluster form of benchmarks/copy_throughput.py without running it: which broker leads
which partition, and the options it gives the copy job, as the job itself parses them."""

from __future__ import annotations

from pathlib import Path

from benchmarks.copy_throughput import BROKER_SETTINGS, JOB_BUCKET, Brokers
from jobs.common import JobArgs, job_parser, parse_job_args
from tests.broker_process import BrokerProcess


def brokers_of(tmp_path: Path, ids: tuple[int, ...]) -> Brokers:
    """Broker processes configured as the benchmark configures them (not started)."""
    overrides = {**BROKER_SETTINGS, "rsm.config.s3.endpoint.url": "http://127.0.0.1:9"}
    return Brokers(
        processes={
            broker_id: BrokerProcess(
                tmp_path / f"broker-{broker_id}",
                overrides={**overrides, "broker.id": str(broker_id)},
            )
            for broker_id in ids
        }
    )


def parsed(brokers: Brokers) -> JobArgs:
    options = ["--bootstrap-server", brokers.bootstrap, *brokers.job_options()]
    return parse_job_args(
        job_parser("copy_segments", None), options, job="copy_segments", environ={}
    )


def test_the_cluster_form_gives_the_job_every_leaders_log_dir_and_the_store(
    tmp_path: Path,
) -> None:
    brokers = brokers_of(tmp_path, (1, 2, 3))
    assert [brokers.leader_of(p) for p in range(7)] == [1, 2, 3, 1, 2, 3, 1]

    args = parsed(brokers)
    assert args.broker_log_dirs == {
        broker_id: (broker.log_dir,) for broker_id, broker in brokers.processes.items()
    }
    assert args.log_dirs_by_broker(None) == args.broker_log_dirs
    assert args.rsm_class_name == "S3RemoteStorageManager"
    assert args.rsm_config["rsm.config.s3.bucket.name"] == JOB_BUCKET


def test_the_single_broker_form_reads_its_one_broker_config(tmp_path: Path) -> None:
    brokers = brokers_of(tmp_path, (0,))
    assert {brokers.leader_of(p) for p in range(4)} == {0}
    (broker,) = brokers.processes.values()
    assert brokers.job_options() == ["--broker-config", str(broker.config_path)]
    args = parsed(brokers)
    assert args.broker_log_dirs == {}
    assert args.log_dirs == (broker.log_dir,)
