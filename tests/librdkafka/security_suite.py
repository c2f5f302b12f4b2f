"""librdkafka's own security tests against a secured broker: ``make librdkafka-security``
(``python -m tests.librdkafka.security_suite``).

librdkafka's test suite comes from Debian's source package (``apt-get source librdkafka``,
2.0.2 on bookworm), built once into ``test-artifacts/librdkafka/`` (a second run finds the
build there and skips it); ``LIBRDKAFKA_TESTS_DIR`` names another built source tree instead.

The cluster is one broker (``BrokerProcess``) with three listeners and Kafka's ACL authorizer::

    SASL_SSL   PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; the brokers log in as User:broker (PLAIN)
    SSL        ssl.client.auth=required: the principal is the client certificate's subject
    PLAINTEXT  User:ANONYMOUS, for 0115 and 0119 only (below)

    super.users = User:admin;User:broker        allow.everyone.if.no.acl.found = false

The test certificates come from ``tests/security_support.py``. The SCRAM user ``rdkafka`` is
created through AlterUserScramCredentials and every principal the tests use gets its ACLs
through CreateAcls (after 0081's ACL subtests), both sent by confluent-kafka's AdminClient as
User:admin over SASL_SSL.

Each test runs in its own ``test-runner`` with a ``test.conf`` of its own
(``RDKAFKA_TEST_CONF``), and gets a verdict from the runner's summary; anything but PASSED
fails the run (a test that skips itself proved nothing):

- 0081's CreateAcls, DescribeAcls and DeleteAcls subtests (``SUBTESTS=Acls``) as User:admin on
  SASL_SSL, first, while the cluster holds no ACL: they count the bindings a MATCH filter
  finds for their topic, which the wildcard grants below would add to.
- 0001, 0002, 0004, 0011, 0012 (produce and consume) and 0135 (sasl_credentials: a wrong
  username and password, then the right ones set on the live client) on SASL_SSL with
  SCRAM-SHA-256; 0135 again with SCRAM-SHA-512 and PLAIN.
- 0012 as the client certificate's principal, 0097 (ssl_verify: the certificate verification
  callback accepting and refusing the broker, keys and certificates as files, PEM strings, DER
  and PKCS#12 through the setters) and 0133 (ssl_keys, local) on SSL with a client
  certificate; 0097 reads the ``SSL_*`` variables trivup would set, written here from the same
  certificates.
- 0115 (producer_auth) and 0119 (consumer_auth) skip themselves on any protocol but PLAINTEXT
  ("We can't bother passing Java security config to kafka-acls.sh"), so they run on the
  PLAINTEXT listener, where User:ANONYMOUS holds ALL on every topic, group and the cluster, and
  the DENY ACLs the tests add for ``User:*`` must win. They add them by running
  ``$KAFKA_PATH/bin/kafka-acls.sh``: KAFKA_PATH here holds a ``kafka-acls.sh`` that runs
  ``storage-core acls`` with the test's options, as User:admin over SASL_SSL (CreateAcls).

librdkafka 2.0.2 has no test 0142 (re-authentication, KIP-368, came with librdkafka 2.2):
re-authentication is proven with librdkafka 2.16 through confluent-kafka in
tests/integration/test_sasl_reauthentication.py.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography.hazmat.primitives import serialization

from embedded.ports import free_port
from tests.broker_process import BrokerProcess
from tests.security_support import TestPki, ssl_listener_props

REPO = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO / "test-artifacts" / "librdkafka"
BUILT_STAMP = ".storage-core-built"
TESTS_DIR_ENV = "LIBRDKAFKA_TESTS_DIR"
TIMEOUT_S = 30
TEST_TIMEOUT_S = 600
BUILD_PACKAGES = (
    "dpkg-dev",
    "build-essential",
    "libssl-dev",
    "zlib1g-dev",
    "libzstd-dev",
    "liblz4-dev",
    "rapidjson-dev",
)

ADMIN = ("admin", "admin-secret")
BROKER = ("broker", "broker-secret")
SCRAM_USER = ("rdkafka", "rdkafka-secret")
PLAIN_USER = ("rdkafka-plain", "rdkafka-plain-secret")
KEY_PASSWORD = "rdkafka-key-secret"
CLIENT_DN = "CN=rdkafka,OU=clients,O=storage-core"


# -- the build ------------------------------------------------------------------------------


def built_tree(directory: Path) -> bool:
    return (directory / "tests" / "test-runner").is_file() and (
        directory / "src" / "librdkafka.so.1"
    ).exists()


def find_build() -> Path | None:
    """A built librdkafka source tree: ``$LIBRDKAFKA_TESTS_DIR``, else the cached build."""
    named = os.environ.get(TESTS_DIR_ENV)
    if named:
        return Path(named) if built_tree(Path(named)) else None
    for stamp in sorted(CACHE_DIR.glob(f"librdkafka-*/{BUILT_STAMP}")):
        if built_tree(stamp.parent):
            return stamp.parent
    return None


class BuildError(RuntimeError):
    """librdkafka's sources could not be obtained or built."""


def _run(command: Sequence[str], cwd: Path, log: Path) -> None:
    print(f"$ {shlex.join(command)}  (in {cwd}, output in {log})", flush=True)
    with log.open("ab") as output:
        code = subprocess.run(
            command, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, check=False
        ).returncode
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise BuildError(f"{shlex.join(command)} exited with {code}; its output ends:\n{tail}")


def _ensure_deb_src() -> None:
    """As root, a deb-src entry beside each deb one of /etc/apt/sources.list.d/*.sources
    (``apt-get source`` needs one); elsewhere the entry must be there already."""
    sources = Path("/etc/apt/sources.list.d")
    if any("deb-src" in p.read_text() for p in sources.glob("*.sources")):
        return
    if os.geteuid() != 0:
        raise BuildError(
            "apt-get source needs a deb-src entry: add a file to /etc/apt/sources.list.d/ with"
            " 'Types: deb-src' and the URIs and suites of the deb one (or run this as root,"
            " which adds it), or set LIBRDKAFKA_TESTS_DIR to a built librdkafka source tree"
        )
    stanzas = []
    for path in sorted(sources.glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            if re.search(r"^Types:.*\bdeb\b", stanza, re.M):
                stanzas.append(re.sub(r"^Types:.*$", "Types: deb-src", stanza, flags=re.M))
    if not stanzas:
        raise BuildError("no deb entry in /etc/apt/sources.list.d/*.sources to copy as deb-src")
    (sources / "storage-core-deb-src.sources").write_text("\n\n".join(stanzas) + "\n")


def obtain_and_build() -> Path:
    """Debian's librdkafka sources fetched and built into CACHE_DIR (once)."""
    found = find_build()
    if found is not None:
        print(f"librdkafka's test suite: the build in {found}", flush=True)
        return found
    if shutil.which("apt-get") is None:
        raise BuildError(
            "no apt-get to fetch Debian's librdkafka sources: set LIBRDKAFKA_TESTS_DIR to a"
            " librdkafka source tree built with `make -C src && make -C src-cpp &&"
            " make -C tests build`"
        )
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    log = CACHE_DIR / "build.log"
    _ensure_deb_src()
    if os.geteuid() == 0:
        _run(["apt-get", "update", "-qq"], CACHE_DIR, log)
        _run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *BUILD_PACKAGES],
            CACHE_DIR,
            log,
        )
    trees = [p for p in CACHE_DIR.glob("librdkafka-*") if (p / "configure").is_file()]
    if not trees:
        _run(["apt-get", "source", "librdkafka"], CACHE_DIR, log)
        trees = [p for p in CACHE_DIR.glob("librdkafka-*") if (p / "configure").is_file()]
    if not trees:
        raise BuildError(f"apt-get source librdkafka left no source tree in {CACHE_DIR}")
    tree = sorted(trees)[-1]
    jobs = f"-j{os.cpu_count() or 1}"
    _run(["./configure", "--disable-gssapi", "--disable-curl"], tree, log)
    _run(["make", jobs, "-C", "src"], tree, log)
    _run(["make", jobs, "-C", "src-cpp"], tree, log)
    _run(["make", jobs, "-C", "tests", "build"], tree, log)
    if not built_tree(tree):
        raise BuildError(f"the build of {tree} left no tests/test-runner; see {log}")
    (tree / BUILT_STAMP).write_text("built\n")
    return tree


# -- the cluster ----------------------------------------------------------------------------


def _jaas_plain(user: tuple[str, str], users: Sequence[tuple[str, str]]) -> str:
    accounts = "".join(f' user_{name}="{password}"' for name, password in users)
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' username="{user[0]}" password="{user[1]}"{accounts};'
    )


def _properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    path.chmod(0o600)
    return path


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientFiles:
    """What the clients of the cluster are given: test.conf per protocol and mechanism, the
    ``SSL_*`` variables of test 0097 and the KAFKA_PATH of the kafka-acls.sh replacement."""

    sasl_ssl: dict[str, Path]  # mechanism -> test.conf
    admin: Path  # SASL_SSL PLAIN as User:admin
    ssl: Path
    plaintext: Path
    ssl_env: dict[str, str]
    kafka_path: Path


class SecuredCluster:
    """The broker described in the module docstring, in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pki = TestPki(directory)
        certificate = self.pki.issue("broker", "CN=localhost,OU=brokers,O=storage-core")
        self.client = self.pki.issue("rdkafka", CLIENT_DN)
        self.sasl_ssl_port, self.ssl_port, self.plain_port = free_port(), free_port(), free_port()
        self.process = BrokerProcess(
            directory / "broker",
            port=self.sasl_ssl_port,
            overrides={
                "listeners": f"SASL_SSL://127.0.0.1:{self.sasl_ssl_port},"
                f"SSL://127.0.0.1:{self.ssl_port},PLAINTEXT://127.0.0.1:{self.plain_port}",
                "inter.broker.listener.name": "SASL_SSL",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": _jaas_plain(
                    BROKER, [BROKER, ADMIN, PLAIN_USER]
                ),
                **ssl_listener_props(self.pki, certificate),
                "listener.name.ssl.ssl.client.auth": "required",
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": f"User:{ADMIN[0]};User:{BROKER[0]}",
                "allow.everyone.if.no.acl.found": "false",
                "offsets.topic.replication.factor": "1",
                "auto.create.topics.enable": "true",
                "num.partitions": "4",  # as trivup sets up librdkafka's test cluster
            },
        )

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_ssl_port}"

    def admin_config(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.sasl_ssl_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": ADMIN[0],
            "sasl.password": ADMIN[1],
            "ssl.ca.location": str(self.pki.ca_pem),
        }

    def start(self, *, grant: bool = True) -> None:
        """Starts the broker and creates the SCRAM user; ``grant``: the clients' ACLs too."""
        self.process.start()
        self._create_scram_user()
        if grant:
            self.grant_clients()

    def stop(self) -> None:
        try:
            self.process.stop()
        except RuntimeError:
            self.process.kill()

    def _create_scram_user(self) -> None:
        admin = AdminClient(self.admin_config())
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    SCRAM_USER[0], ScramCredentialInfo(mechanism, 4096), SCRAM_USER[1].encode()
                )
                for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
            ],
            request_timeout=TIMEOUT_S,
        )
        for future in futures.values():
            future.result(timeout=TIMEOUT_S)

    def grant_clients(self) -> None:
        """ALL on every topic, group and transactional id and on the cluster for each
        principal the tests connect as."""
        principals = (
            f"User:{SCRAM_USER[0]}",
            f"User:{PLAIN_USER[0]}",
            f"User:{CLIENT_DN}",
            "User:ANONYMOUS",
        )
        resources = (
            (ResourceType.TOPIC, "*"),
            (ResourceType.GROUP, "*"),
            (ResourceType.TRANSACTIONAL_ID, "*"),
            (ResourceType.BROKER, "kafka-cluster"),
        )
        bindings = [
            AclBinding(
                resource_type,
                name,
                ResourcePatternType.LITERAL,
                principal,
                "*",
                AclOperation.ALL,
                AclPermissionType.ALLOW,
            )
            for principal in principals
            for resource_type, name in resources
        ]
        admin = AdminClient(self.admin_config())
        for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
            future.result(timeout=TIMEOUT_S)

    def client_files(self) -> ClientFiles:
        """Writes the clients' files into ``directory / "clients"``."""
        clients = self.directory / "clients"
        clients.mkdir(exist_ok=True)
        common = {
            "test.timeout.multiplier": "3",
            "ssl.ca.location": str(self.pki.ca_pem),
        }
        sasl_ssl = {
            mechanism: _properties(
                clients / f"sasl_ssl-{mechanism.lower()}.conf",
                {
                    "bootstrap.servers": self.sasl_ssl_bootstrap,
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": mechanism,
                    "sasl.username": user[0],
                    "sasl.password": user[1],
                    **common,
                },
            )
            for mechanism, user in (
                ("SCRAM-SHA-256", SCRAM_USER),
                ("SCRAM-SHA-512", SCRAM_USER),
                ("PLAIN", PLAIN_USER),
            )
        }
        admin = _properties(
            clients / "sasl_ssl-admin.conf",
            {
                "bootstrap.servers": self.sasl_ssl_bootstrap,
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": ADMIN[0],
                "sasl.password": ADMIN[1],
                **common,
            },
        )
        key_pem = clients / "rdkafka.key.pem"
        key_pem.write_bytes(self.client.encrypted_key_pem(KEY_PASSWORD))
        key_der = clients / "rdkafka.key.der"
        key_der.write_bytes(
            self.client.key.private_bytes(
                serialization.Encoding.DER,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        cert_der = clients / "rdkafka.cert.der"
        cert_der.write_bytes(self.client.certificate.public_bytes(serialization.Encoding.DER))
        ca_der = clients / "ca.der"
        ca_der.write_bytes(self.pki.ca_certificate.public_bytes(serialization.Encoding.DER))
        ssl = _properties(
            clients / "ssl.conf",
            {
                "bootstrap.servers": f"127.0.0.1:{self.ssl_port}",
                "security.protocol": "SSL",
                "ssl.key.location": str(key_pem),
                "ssl.key.password": KEY_PASSWORD,
                "ssl.certificate.location": str(self.client.cert_file),
                **common,
            },
        )
        plaintext = _properties(
            clients / "plaintext.conf",
            {"bootstrap.servers": f"127.0.0.1:{self.plain_port}", "test.timeout.multiplier": "3"},
        )
        ssl_env = {  # what trivup sets for 0097
            "SSL_password": KEY_PASSWORD,
            "SSL_pkcs": str(self.client.pkcs12(KEY_PASSWORD)),
            "SSL_pub_der": str(cert_der),
            "SSL_pub_pem": str(self.client.cert_file),
            "SSL_priv_der": str(key_der),
            "SSL_priv_pem": str(key_pem),
            "SSL_ca_der": str(ca_der),
            "SSL_all_cas_pem": str(self.pki.ca_pem),
        }
        return ClientFiles(
            sasl_ssl=sasl_ssl,
            admin=admin,
            ssl=ssl,
            plaintext=plaintext,
            ssl_env=ssl_env,
            kafka_path=self._kafka_acls_shim(clients),
        )

    def _kafka_acls_shim(self, clients: Path) -> Path:
        """``<KAFKA_PATH>/bin/kafka-acls.sh``: storage-core acls with the caller's options,
        sent as User:admin over SASL_SSL (the --bootstrap-server given, the test's PLAINTEXT
        listener, is replaced: argparse keeps the last one)."""
        command_config = _properties(
            clients / "admin.properties",
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": _jaas_plain(ADMIN, []),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.pki.ca_pem),
            },
        )
        kafka_path = clients / "kafka"
        (kafka_path / "bin").mkdir(parents=True, exist_ok=True)
        shim = kafka_path / "bin" / "kafka-acls.sh"
        shim.write_text(
            "#!/bin/sh\n"
            "# kafka-acls.sh for librdkafka's tests: the same options to storage-core acls\n"
            "# (CreateAcls), as the admin over SASL_SSL.\n"
            f"cd {shlex.quote(str(REPO))} && exec {shlex.quote(sys.executable)}"
            ' -m storage_core.cli acls "$@"'
            f" --bootstrap-server {self.sasl_ssl_bootstrap}"
            f" --command-config {shlex.quote(str(command_config))}\n"
        )
        shim.chmod(0o755)
        return kafka_path


@contextmanager
def secured_cluster(directory: Path, *, grant: bool = True) -> Iterator[SecuredCluster]:
    cluster = SecuredCluster(directory)
    cluster.start(grant=grant)
    try:
        yield cluster
    finally:
        cluster.stop()


# -- the tests ------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\(B")
_SUMMARY_ROW = re.compile(r"^\|\s*(\d{4}_\S+)\s*\|\s*(\w+)\s*\|")


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One librdkafka test on one test.conf."""

    test: str  # e.g. "0097"
    setup: str  # e.g. "SASL_SSL SCRAM-SHA-256"
    subtests: str | None = None  # SUBTESTS: a substring of the subtests' names
    before_grants: bool = False  # runs while the cluster holds no ACL yet


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    case: Case
    status: str  # PASSED, FAILED, SKIPPED, TIMEOUT, NOT RUN
    seconds: float
    output: Path

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"


def cases(files: ClientFiles, tests: Sequence[str] | None = None) -> list[tuple[Case, Path]]:
    """Every case of the suite (``tests``: only those tests) with its test.conf."""
    scram = files.sasl_ssl["SCRAM-SHA-256"]
    acl_apis = Case(
        test="0081",
        setup="SASL_SSL PLAIN admin, Create/Describe/DeleteAcls subtests",
        subtests="Acls",
        before_grants=True,
    )
    chosen = [
        *((t, "SASL_SSL SCRAM-SHA-256", scram) for t in ("0001", "0002", "0004", "0011", "0012")),
        ("0135", "SASL_SSL SCRAM-SHA-256", scram),
        ("0135", "SASL_SSL SCRAM-SHA-512", files.sasl_ssl["SCRAM-SHA-512"]),
        ("0135", "SASL_SSL PLAIN", files.sasl_ssl["PLAIN"]),
        ("0012", "SSL client certificate", files.ssl),
        ("0097", "SSL client certificate", files.ssl),
        ("0133", "SSL client certificate", files.ssl),
        ("0115", "PLAINTEXT, ACLs by kafka-acls.sh -> storage-core acls", files.plaintext),
        ("0119", "PLAINTEXT, ACLs by kafka-acls.sh -> storage-core acls", files.plaintext),
    ]
    return [
        (case, conf)
        for case, conf in [
            (acl_apis, files.admin),
            *((Case(test=t, setup=setup), conf) for t, setup, conf in chosen),
        ]
        if tests is None or case.test in tests
    ]


def run_case(
    tree: Path, case: Case, conf: Path, files: ClientFiles, logs: Path, timeout_s: float
) -> Verdict:
    """``TESTS=<test> ./test-runner -p1`` in librdkafka's tests directory, its output in
    ``logs``; the verdict is the runner's summary row for the test."""
    tests_dir = tree / "tests"
    library_path = f"{tree / 'src'}:{tree / 'src-cpp'}"
    env = {
        **os.environ,
        **files.ssl_env,
        "TESTS": case.test,
        **({"SUBTESTS": case.subtests} if case.subtests else {}),
        "RDKAFKA_TEST_CONF": str(conf),
        "TEST_KAFKA_VERSION": "3.1.0",
        "KAFKA_PATH": str(files.kafka_path),
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
            cwd=tests_dir,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            code = None
    seconds = time.monotonic() - started
    if code is None:
        return Verdict(case=case, status="TIMEOUT", seconds=seconds, output=output)
    rows = [
        match.groups()
        for line in _ANSI.sub("", output.read_text(errors="replace")).splitlines()
        if (match := _SUMMARY_ROW.match(line)) and match.group(1).startswith(f"{case.test}_")
    ]
    statuses = {status for _, status in rows}
    if code != 0 or "FAILED" in statuses:
        status = "FAILED"
    elif not rows:
        status = "NOT RUN"
    elif statuses == {"PASSED"}:
        status = "PASSED"
    else:
        status = "/".join(sorted(statuses))
    return Verdict(case=case, status=status, seconds=seconds, output=output)


def run_suite(
    tree: Path, directory: Path, tests: Sequence[str] | None = None, *, timeout_s: float
) -> list[Verdict]:
    with secured_cluster(directory, grant=False) as cluster:
        files = cluster.client_files()
        logs = directory / "logs"
        logs.mkdir(exist_ok=True)
        verdicts = []
        granted = False
        for case, conf in sorted(cases(files, tests), key=lambda c: not c[0].before_grants):
            if not case.before_grants and not granted:
                cluster.grant_clients()
                granted = True
            verdict = run_case(tree, case, conf, files, logs, timeout_s)
            print(
                f"{case.test}  {case.setup:<55} {verdict.status:<8} {verdict.seconds:6.1f} s"
                f"  {verdict.output}",
                flush=True,
            )
            verdicts.append(verdict)
    leaks = secrets_in(logs, cluster.process.output_path)
    for path in leaks:
        print(f"a password of the suite appears in {path}", flush=True)
    return verdicts if not leaks else [*verdicts, _leak_verdict(logs)]


SECRETS = (ADMIN[1], BROKER[1], SCRAM_USER[1], PLAIN_USER[1], KEY_PASSWORD)


def secrets_in(logs: Path, broker_log: Path) -> list[Path]:
    """The test outputs and the broker's log that hold one of the suite's passwords."""
    return [
        path
        for path in [*sorted(logs.glob("*.log")), broker_log]
        if any(secret.encode() in path.read_bytes() for secret in SECRETS)
    ]


def _leak_verdict(logs: Path) -> Verdict:
    case = Case(test="----", setup="no password in the outputs and the broker's log")
    return Verdict(case=case, status="FAILED", seconds=0.0, output=logs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tests", help="comma separated test numbers (default: all of the suite), e.g. 0097,0135"
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
    directory = args.dir or Path(tempfile.mkdtemp(prefix="librdkafka-security-"))
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
