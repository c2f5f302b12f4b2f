"""``python -m embedded.cluster``: a local cluster of N brokers on ZooKeeper, until Ctrl-C.

    python -m embedded.cluster --dir cluster-data --brokers 3 [--zookeeper-nodes 3] [--fresh]

It prints the bootstrap servers and the ZooKeeper address once every broker answers, and on
Ctrl-C or SIGTERM stops the brokers, then ZooKeeper, leaving no process behind. A directory
it did not create is refused; one it created is reused (topics and records kept) unless
``--fresh`` empties it first.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from embedded.cluster import ClusterStartError, DirectoryInUseError, prepare_directory
from embedded.cluster_processes import ClusterProcesses
from embedded.zookeeper import ZooKeeperUnavailableError

WATCH_INTERVAL_S = 1.0


class StopRequestedError(Exception):
    """SIGTERM or Ctrl-C: stop the cluster."""


def _stop_requested(signum: int, _frame: FrameType | None) -> None:
    # once: a second signal while stopping must not cut the stop short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise StopRequestedError(signal.Signals(signum).name)


def watch(cluster: ClusterProcesses) -> None:
    """Until a stop is requested: say once when a broker process ends by itself."""
    reported: set[int] = set()
    while True:
        for broker in cluster.brokers:
            code = broker.exit_code()
            if code is not None and broker.broker_id not in reported:
                reported.add(broker.broker_id)
                print(
                    f"broker {broker.broker_id} exited with {code}; see {broker.output_path}",
                    flush=True,
                )
        time.sleep(WATCH_INTERVAL_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m embedded.cluster",
        description="Run ZooKeeper and N brokers on loopback until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--dir", type=Path, default=Path("cluster-data"), help="working directory")
    parser.add_argument("--brokers", type=int, default=3, help="broker processes (default 3)")
    parser.add_argument(
        "--zookeeper-nodes", type=int, default=1, help="1: standalone, 3: an ensemble (default 1)"
    )
    parser.add_argument("--fresh", action="store_true", help="empty a directory of a past run")
    args = parser.parse_args(argv)
    try:
        cluster = ClusterProcesses(
            args.dir, brokers=args.brokers, zookeeper_nodes=args.zookeeper_nodes
        )
        prepare_directory(cluster.directory, fresh=args.fresh)
    except (ValueError, DirectoryInUseError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop_requested)
    signal.signal(signal.SIGINT, _stop_requested)
    try:
        cluster.start()
        print(f"bootstrap servers: {cluster.bootstrap_servers}", flush=True)
        print(f"zookeeper.connect: {cluster.zookeeper_connect}", flush=True)
        print(f"logs and data under {cluster.directory}; Ctrl-C stops the cluster", flush=True)
        watch(cluster)
    except StopRequestedError as stop:
        print(f"{stop}: stopping brokers, then ZooKeeper", flush=True)
    except (ClusterStartError, ZooKeeperUnavailableError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.stop()
    print("stopped", flush=True)
    return 0
