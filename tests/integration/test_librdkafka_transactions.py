"""A short run of librdkafka's own transaction tests (``make librdkafka-transactions`` runs them
all) on ZooKeeper and three brokers: 0103's consume-transform-produce subtest (ten
transactions with send_offsets_to_transaction, input and output topics with replication
factor 3, checked by a read_committed consumer) and 0129 (a partition holding only aborted
data, more than a fetch of it, consumed to its end without an error).

They run where a built librdkafka source tree is found: the one ``make librdkafka-security``
or ``make librdkafka-transactions`` caches in test-artifacts/librdkafka/, or the one
``LIBRDKAFKA_TESTS_DIR`` names; elsewhere they are skipped with that reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import cluster_support
from tests.librdkafka.security_suite import CACHE_DIR, TESTS_DIR_ENV, Case, find_build
from tests.librdkafka.transactions_suite import PlainCluster, plain_cluster, run_case

cluster_support.require_java()
pytestmark = pytest.mark.timeout(420)

TREE = find_build()
if TREE is None:
    pytest.skip(
        f"no built librdkafka test suite: run `make librdkafka-transactions` once (it builds"
        f" Debian's librdkafka sources into {CACHE_DIR}) or set {TESTS_DIR_ENV} to a built"
        " librdkafka source tree",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlainCluster]:
    with plain_cluster(tmp_path_factory.mktemp("librdkafka-transactions")) as plain:
        yield plain


@pytest.mark.parametrize(
    "case",
    [
        Case(test="0103", setup="consume-transform-produce", subtests="consumer_producer_txn"),
        Case(test="0129", setup="aborted data only"),
    ],
    ids=lambda case: case.test,
)
def test_librdkafka_transactions_test_passes(
    cluster: PlainCluster, case: Case, tmp_path: Path
) -> None:
    assert TREE is not None
    verdict = run_case(TREE, case, cluster.test_conf, tmp_path, timeout_s=300)
    output = verdict.output.read_text(errors="replace")
    assert verdict.status == "PASSED", f"{case.test}: {verdict.status}\n{output[-4000:]}"
    if case.subtests:
        assert "transactional test with 10 transactions: PASS" in output
