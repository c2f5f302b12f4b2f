"""``docker-compose.yml`` as Compose reads it, without Docker: variable substitution with every
default taken, services' environment and mounts, and the settings the brokers and ZooKeeper
nodes are given (read by the structural tests and by the test that runs the same topology as
local processes)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from storage_core.cli import _build_parser

COMPOSE_FILE = Path(__file__).resolve().parents[1] / "docker-compose.yml"
# ``server.N=host:quorum:election[:role];[address:]client`` (ZooKeeper's dynamic config form).
ZOO_SERVER = re.compile(
    r"server\.(?P<id>\d+)=(?P<host>[\w.-]+):(?P<quorum>\d+):(?P<election>\d+)"
    r"(?::(?:participant|observer))?;(?:[\w.-]+:)?(?P<client>\d+)"
)
_SUBSTITUTION = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_]\w*))")


def substitute(text: str) -> str:
    """Compose's variable substitution with no variable set: ``$$`` is a literal ``$`` and
    every ``${VAR:-default}`` takes its default. A variable without a default fails: the file
    must start as it is, with no ``.env``."""

    def replace(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        expression = match.group("braced") or match.group("bare")
        name, separator, default = expression.partition(":-")
        if not separator:
            raise AssertionError(
                f"${{{expression}}} has no default: write ${{{name}:-<local default>}}"
            )
        return default

    return _SUBSTITUTION.sub(replace, text)


def substituted(value: Any) -> Any:
    if isinstance(value, str):
        return substitute(value)
    if isinstance(value, Mapping):
        return {key: substituted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [substituted(item) for item in value]
    return value


def load_raw() -> dict[str, Any]:
    """The file as YAML reads it (anchors and ``<<`` merges resolved, variables not)."""
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict), f"{COMPOSE_FILE} is not a mapping"
    return document


def load_services() -> dict[str, dict[str, Any]]:
    """Every service with its variables substituted."""
    services: dict[str, dict[str, Any]] = substituted(load_raw())["services"]
    return services


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return dict(env)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    source: str
    target: str
    read_only: bool


def mounts(service: Mapping[str, Any]) -> list[Mount]:
    """Short (``source:target[:ro]``) and long (``{source, target, read_only}``) syntax."""
    found = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, target, *options = volume.split(":")
            read_only = bool(options) and "ro" in options[0].split(",")
            found.append(Mount(source=source, target=target, read_only=read_only))
        else:
            found.append(
                Mount(
                    source=volume["source"],
                    target=volume["target"],
                    read_only=bool(volume.get("read_only", False)),
                )
            )
    return found


def broker_argv(service: Mapping[str, Any]) -> list[str]:
    """The broker's ``storage-core`` arguments: entrypoint (after the init) then command."""
    argv = [*service["entrypoint"], *service["command"]]
    return argv[argv.index("storage-core") + 1 :]


def broker_props(service: Mapping[str, Any]) -> dict[str, str]:
    args = _build_parser().parse_args(broker_argv(service))
    assert args.command == "broker"
    assert args.config is None, "the brokers are configured by --override only"
    props = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        assert sep, f"--override {item!r} is not KEY=VALUE"
        assert key not in props, f"--override {key} is given twice"
        props[key] = value
    return props


def image_tag(image: str) -> tuple[str, str]:
    name, _, tag = image.rpartition(":")
    if "/" in tag or not name:  # a registry port, not a tag
        return image, ""
    return name, tag


@dataclass(frozen=True, slots=True, kw_only=True)
class ZooServer:
    """One ``server.N`` entry of ``ZOO_SERVERS``."""

    host: str
    quorum_port: int
    election_port: int
    client_port: int


def zookeeper_servers(service: Mapping[str, Any]) -> dict[int, ZooServer]:
    """``ZOO_SERVERS`` (whitespace-separated, as the image's entrypoint splits it) by id."""
    found: dict[int, ZooServer] = {}
    for entry in environment(service)["ZOO_SERVERS"].split():
        match = ZOO_SERVER.fullmatch(entry)
        assert match, f"{entry!r} is not server.N=host:quorum:election;client"
        my_id = int(match["id"])
        assert my_id not in found, f"server.{my_id} is listed twice"
        found[my_id] = ZooServer(
            host=match["host"],
            quorum_port=int(match["quorum"]),
            election_port=int(match["election"]),
            client_port=int(match["client"]),
        )
    return found
