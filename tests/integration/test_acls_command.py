"""``storage-core acls`` against a broker process: kafka-acls.sh's options and output, checked
against what the broker then answers to confluent-kafka's DescribeAcls."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("acls-command"),
        overrides={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",
        },
    ) as b:
        yield b


def acls(broker: BrokerProcess, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "storage_core.cli",
            "acls",
            "--bootstrap-server",
            broker.bootstrap,
            *list(args),
        ],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


def described(broker: BrokerProcess) -> set[str]:
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    found = admin.describe_acls(every, request_timeout=15).result(timeout=15)
    return {
        f"{b.restype.name}:{b.name}:{b.resource_pattern_type.name}:{b.principal}:{b.host}:"
        f"{b.operation.name}:{b.permission_type.name}"
        for b in found
    }


def test_add_producer_and_consumer_list_and_remove(broker: BrokerProcess, tmp_path: Path) -> None:
    added = acls(
        broker, "--add", "--allow-principal", "User:etl", "--producer", "--topic", "orders"
    )
    assert added.returncode == 0, added.stderr
    assert (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders,"
        " patternType=LITERAL)`: \n \t(principal=User:etl, host=*, operation=WRITE,"
        " permissionType=ALLOW) \n"
    ) in added.stdout
    consumer = acls(
        broker,
        "--add",
        "--allow-principal",
        "User:reader",
        "--consumer",
        "--topic",
        "pay-",
        "--group",
        "readers",
        "--resource-pattern-type",
        "prefixed",
    )
    assert consumer.returncode == 0, consumer.stderr
    assert described(broker) == {
        "TOPIC:orders:LITERAL:User:etl:*:WRITE:ALLOW",
        "TOPIC:orders:LITERAL:User:etl:*:DESCRIBE:ALLOW",
        "TOPIC:orders:LITERAL:User:etl:*:CREATE:ALLOW",
        "TOPIC:pay-:PREFIXED:User:reader:*:READ:ALLOW",
        "TOPIC:pay-:PREFIXED:User:reader:*:DESCRIBE:ALLOW",
        "GROUP:readers:PREFIXED:User:reader:*:READ:ALLOW",
    }

    listed = acls(broker, "--list", "--principal", "User:reader")
    assert listed.returncode == 0, listed.stderr
    assert "ACLs for principal `User:reader`" in listed.stdout
    assert "name=orders" not in listed.stdout
    assert "(principal=User:reader, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout

    declined = acls(broker, "--remove", "--topic", "orders", stdin="n\n")
    assert declined.returncode == 0 and "Nothing removed." in declined.stdout
    assert len(described(broker)) == 6

    one = acls(
        broker,
        "--remove",
        "--allow-principal",
        "User:etl",
        "--operation",
        "Create",
        "--topic",
        "orders",
        "--force",
    )
    assert one.returncode == 0, one.stderr
    assert "TOPIC:orders:LITERAL:User:etl:*:CREATE:ALLOW" not in described(broker)
    assert len(described(broker)) == 5

    every = acls(broker, "--remove", "--topic", "orders", "--force")
    assert every.returncode == 0, every.stderr
    assert {a.split(":")[1] for a in described(broker)} == {"pay-", "readers"}


def test_bad_options_are_one_line_errors(broker: BrokerProcess) -> None:
    no_principal = acls(broker, "--add", "--topic", "t")
    assert no_principal.returncode == 1
    assert no_principal.stderr.strip() == (
        "error: --add needs --allow-principal or --deny-principal"
    )
    bad_operation = acls(
        broker, "--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"
    )
    assert bad_operation.returncode == 1
    assert "--operation Fly is not an ACL operation" in bad_operation.stderr


def test_without_an_authorizer_the_broker_says_so(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as plain:
        result = acls(plain, "--list")
    assert result.returncode == 1
    assert "SECURITY_DISABLED" in result.stderr.upper()
