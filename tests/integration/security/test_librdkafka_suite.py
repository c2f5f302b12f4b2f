"""A short run of librdkafka's own security tests (``make librdkafka-security`` runs them all):
0135 (sasl_credentials) with SCRAM-SHA-256 over SASL_SSL, a librdkafka 2.0 client's SCRAM
login included, and 0115 (producer_auth), whose DENY ACLs go through kafka-acls.sh ->
storage-core acls (CreateAcls) and must stop its producer with TOPIC_AUTHORIZATION_FAILED.

They run where a built librdkafka source tree is found: the one ``make librdkafka-security``
caches in test-artifacts/librdkafka/, or the one ``LIBRDKAFKA_TESTS_DIR`` names; elsewhere
they are skipped with that reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.librdkafka.security_suite import (
    CACHE_DIR,
    TESTS_DIR_ENV,
    ClientFiles,
    SecuredCluster,
    cases,
    find_build,
    run_case,
    secured_cluster,
)

pytestmark = pytest.mark.timeout(300)

TREE = find_build()
if TREE is None:
    pytest.skip(
        f"no built librdkafka test suite: run `make librdkafka-security` once (it builds"
        f" Debian's librdkafka sources into {CACHE_DIR}) or set {TESTS_DIR_ENV} to a built"
        " librdkafka source tree",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecuredCluster, Path]]:
    directory = tmp_path_factory.mktemp("librdkafka-security")
    with secured_cluster(directory) as secured:
        yield secured, directory


@pytest.fixture(scope="module")
def files(cluster: tuple[SecuredCluster, Path]) -> ClientFiles:
    return cluster[0].client_files()


@pytest.mark.parametrize(
    ("test", "setup"),
    [
        ("0135", "SASL_SSL SCRAM-SHA-256"),
        ("0115", "PLAINTEXT, ACLs by kafka-acls.sh -> storage-core acls"),
    ],
)
def test_librdkafka_security_test_passes(
    cluster: tuple[SecuredCluster, Path], files: ClientFiles, test: str, setup: str
) -> None:
    assert TREE is not None
    [(case, conf)] = [(c, conf) for c, conf in cases(files, [test]) if c.setup == setup]
    logs = cluster[1] / "logs"
    logs.mkdir(exist_ok=True)
    verdict = run_case(TREE, case, conf, files, logs, timeout_s=240)
    output = verdict.output.read_text(errors="replace")
    assert verdict.status == "PASSED", f"{test} on {setup}: {verdict.status}\n{output[-4000:]}"
    if test == "0115":
        assert "kafka-acls.sh --bootstrap-server" in output
        assert "Delivery report: Broker: Topic authorization failed" in output
