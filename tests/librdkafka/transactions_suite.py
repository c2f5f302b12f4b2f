"""librdkafka's own transaction tests against a plain cluster: ``make librdkafka-transactions``
(``python -m tests.librdkafka.transactions_suite [--tests 0103,0129]``).

The build is the one ``make librdkafka-security`` makes (Debian's librdkafka 2.0.2 test suite in
``test-artifacts/librdkafka/``, or ``LIBRDKAFKA_TESTS_DIR``; see security_suite.py), built on
the first run if absent.

The cluster is ZooKeeper and three brokers (``BrokerProcess``, PLAINTEXT), as 0103 creates its
topics with replication factor 3::

    auto.create.topics.enable = true    num.partitions = 4   (as trivup sets up librdkafka's)
    transaction.state.log.replication.factor = 3   transaction.state.log.min.isr = 2
    transaction.state.log.num.partitions = 5       offsets.topic.replication.factor = 3

Each test runs in its own ``test-runner`` with a test.conf naming the three brokers (0105's
names none), and gets its verdict from the runner's summary; anything but PASSED fails the run,
and where ``SUBTESTS`` chooses subtests, one must have started and none skipped itself:

- 0103 (transactions): every subtest, none needs Kafka's Java tools (``KAFKA_PATH``): misuse
  of the API, produce with and without compression, a consume-transform-produce loop with
  send_offsets_to_transaction, fencing (with and without produce after it), UNKNOWN_PRODUCER_ID
  after DeleteRecords recovered through KIP-360, empty transactions with and without offsets,
  committed and aborted, and the high watermark and LSO seen by read_committed and
  read_uncommitted consumers; 0103_transactions_local (no broker) runs with it.
- 0105 (transactions_mock), on librdkafka's mock cluster (no broker: it proves the client
  build the other tests use), once per subtest function its main calls (``SUBTESTS=<name>:``),
  but one that fails in 2.0.2 whatever the broker and is therefore left out:
  ``do_test_txn_concurrent_operations`` sets the mock coordinator's round trip to 5 s, as long
  as the ``socket.connection.setup.timeout.ms`` its producer is given, so init_transactions
  never connects (librdkafka issue 4181, fixed in 2.1.0).
- 0129 (fetch_aborted_msgs): a partition of aborted data only, larger than a fetch, consumed
  without MSG_SIZE_TOO_LARGE.
- 0055 (producer_latency), its transactions subtest only (``SUBTESTS=transactions``): a
  transaction per message with ``linger.ms=35``, the delivery latency within 35..85 ms plus the
  round trip (times ``test.timeout.multiplier``) and each commit within the round trip + 50 ms.
  The test skips itself where ``CI`` is set ("Latency measurements not reliable on CI"), which
  would prove nothing: ``CI`` is left out of its environment.
- 0061 (consumer_lag), with and without transactions: the consumer lag in the statistics once
  aborted transactions and their markers advance the end of the log.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.librdkafka.security_suite import (
    _ANSI,
    _SUMMARY_ROW,
    BuildError,
    Case,
    Verdict,
    obtain_and_build,
)

TEST_TIMEOUT_S = 900
KAFKA_VERSION = "3.1.0"
# "[ <function>:<line>: <what> ]" as a subtest starts, then "[ ...: PASS (1.2s) ]" (not
# every subtest says it) or "[ ...: SKIP: <why> ]"
_SUBTEST_LINE = re.compile(r"\] \[ (.*) \]\s*$")

CLUSTER_SETTINGS = {
    "auto.create.topics.enable": "true",
    "num.partitions": "4",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.num.partitions": "5",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}

MOCK_CLUSTER_TEST = "0105"
MOCK_CLUSTER_SOURCE = "0105-transactions_mock.c"
# librdkafka issue 4181, fixed in 2.1.0 (pull request 4186): the subtest sets the mock
# coordinator's round trip to 5 s, as long as the socket.connection.setup.timeout.ms its
# producer is given, so init_transactions never connects; no broker of ours takes part.
MOCK_CLUSTER_BROKEN = {"do_test_txn_concurrent_operations": "librdkafka issue 4181"}


def cases(tree: Path) -> list[Case]:
    """The suite: 0105 as one case per subtest function its main calls (the subtests of one
    function share a name prefix, and SUBTESTS matches a substring), but the broken ones."""
    source = (tree / "tests" / MOCK_CLUSTER_SOURCE).read_text(errors="replace")
    main = source[source.index(f"int main_{MOCK_CLUSTER_TEST}_") :]
    functions = dict.fromkeys(re.findall(r"^\s*(do_test_\w+)\(", main, re.M))
    mock = [
        Case(test=MOCK_CLUSTER_TEST, setup=f"mock cluster, {name}", subtests=f"{name}:")
        for name in functions
        if name not in MOCK_CLUSTER_BROKEN
    ]
    return [
        Case(test="0103", setup="3 brokers, every subtest"),
        *mock,
        Case(test="0129", setup="3 brokers"),
        Case(test="0055", setup="3 brokers, transactions subtest", subtests="transactions"),
        Case(test="0061", setup="3 brokers, with and without transactions"),
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainCluster:
    """The brokers of the module docstring and the test.conf naming them."""

    brokers: dict[int, BrokerProcess]
    test_conf: Path

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())


@contextmanager
def plain_cluster(directory: Path) -> Iterator[PlainCluster]:
    with (
        ZooKeeperEnsemble(directory / "zookeeper") as zookeeper,
        cluster_support.three_brokers(zookeeper, directory, CLUSTER_SETTINGS) as (brokers, _),
    ):
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})  # no disconnects
        cluster_support.eventually(
            lambda: len(admin.describe_cluster().result(10).nodes) == len(brokers),
            what="every broker registered",
        )
        test_conf = directory / "test.conf"
        test_conf.write_text(f"bootstrap.servers={bootstrap}\ntest.timeout.multiplier=3\n")
        yield PlainCluster(brokers=brokers, test_conf=test_conf)


def run_case(tree: Path, case: Case, test_conf: Path, logs: Path, *, timeout_s: float) -> Verdict:
    """``TESTS=<test> ./test-runner -p1`` in librdkafka's tests directory, its output in
    ``logs``; the verdict is the runner's summary rows for the test (0103 has two)."""
    library_path = f"{tree / 'src'}:{tree / 'src-cpp'}"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("CI", "SUBTESTS", "TESTS")},
        "TESTS": case.test,
        **({"SUBTESTS": case.subtests} if case.subtests else {}),
        "RDKAFKA_TEST_CONF": str(test_conf),
        "TEST_KAFKA_VERSION": KAFKA_VERSION,
        "LD_LIBRARY_PATH": ":".join(
            p for p in (library_path, os.environ.get("LD_LIBRARY_PATH")) if p
        ),
    }
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{case.test}-{case.setup}").strip("-").lower()
    output = logs / f"{slug}.log"
    started = time.monotonic()
    with output.open("wb") as sink:
        process = subprocess.Popen(
            ["./test-runner", "-p1"],
            cwd=tree / "tests",
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code: int | None = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            code = None
    seconds = time.monotonic() - started
    return Verdict(case=case, status=_status(case, output, code), seconds=seconds, output=output)


def _status(case: Case, output: Path, code: int | None) -> str:
    """The runner's verdict; with SUBTESTS, NOT RUN unless a chosen subtest started and none
    skipped itself (a SUBTESTS matching nothing passes the test having done nothing)."""
    if code is None:
        return "TIMEOUT"
    lines = _ANSI.sub("", output.read_text(errors="replace")).splitlines()
    rows = [
        match.groups()
        for line in lines
        if (match := _SUMMARY_ROW.match(line)) and match.group(1).startswith(f"{case.test}_")
    ]
    statuses = {status for _, status in rows}
    if code != 0 or "FAILED" in statuses:
        return "FAILED"
    if not rows:
        return "NOT RUN"
    if case.subtests:
        chosen = [m.group(1) for line in lines if (m := _SUBTEST_LINE.search(line))]
        chosen = [said for said in chosen if case.subtests in said]
        if not chosen or any(": SKIP: " in said for said in chosen):
            return "NOT RUN"
    if statuses == {"PASSED"}:
        return "PASSED"
    return "/".join(sorted(statuses))


def run_suite(
    tree: Path, directory: Path, tests: Sequence[str] | None = None, *, timeout_s: float
) -> list[Verdict]:
    chosen = [case for case in cases(tree) if tests is None or case.test in tests]
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    verdicts = []
    mock_conf = directory / "mock.conf"
    mock_conf.write_text("test.timeout.multiplier=3\n")
    for case in chosen:
        if case.test == MOCK_CLUSTER_TEST:
            verdicts.append(_run_and_show(tree, case, mock_conf, logs, timeout_s))
    if any(case.test != MOCK_CLUSTER_TEST for case in chosen):
        with plain_cluster(directory) as cluster:
            for case in chosen:
                if case.test != MOCK_CLUSTER_TEST:
                    verdicts.append(_run_and_show(tree, case, cluster.test_conf, logs, timeout_s))
    return verdicts


def _run_and_show(tree: Path, case: Case, test_conf: Path, logs: Path, timeout_s: float) -> Verdict:
    verdict = run_case(tree, case, test_conf, logs, timeout_s=timeout_s)
    print(
        f"{case.test}  {case.setup:<58} {verdict.status:<8} {verdict.seconds:6.1f} s"
        f"  {verdict.output}",
        flush=True,
    )
    return verdict


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tests", help="comma separated test numbers (default: all of the suite), e.g. 0103,0129"
    )
    parser.add_argument(
        "--dir", type=Path, help="where the cluster and logs go (default: a temporary directory)"
    )
    parser.add_argument("--timeout", type=float, default=TEST_TIMEOUT_S, help="seconds per test")
    args = parser.parse_args(argv)
    try:
        tree = obtain_and_build()
    except BuildError as error:
        print(f"librdkafka's test suite is not available: {error}", file=sys.stderr)
        return 2
    tests = args.tests.split(",") if args.tests else None
    directory = args.dir or Path(tempfile.mkdtemp(prefix="librdkafka-transactions-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"librdkafka tests from {tree}; cluster and logs in {directory}", flush=True)
    verdicts = run_suite(tree, directory, tests, timeout_s=args.timeout)
    failed = [v for v in verdicts if not v.passed]
    print(
        f"{len(verdicts) - len(failed)} of {len(verdicts)} passed"
        + "".join(f"\n  {v.case.test} ({v.case.setup}): {v.status}, see {v.output}" for v in failed)
    )
    return 1 if failed or not verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
