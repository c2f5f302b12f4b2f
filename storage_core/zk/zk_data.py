"""The cluster's state in Apache ZooKeeper, laid out and encoded as Kafka's ZooKeeper mode did
(``kafka.zk.ZkData``), so that a reader of Kafka's sources, or ``zkCli.sh``, finds it where
they expect it. Pure encoding and decoding: no client, no I/O.

    /cluster/id                                  {"version":"1","id":"<cluster id>"}
    /controller                   (ephemeral)    {"version":2,"brokerid":1,"timestamp":"<ms>",
                                                  "kraftControllerEpoch":-1}
    /controller_epoch                            "7"  (plain text)
    /brokers/ids/<id>             (ephemeral)    {"version":5,"host":"127.0.0.1","port":9092,
                                                  "endpoints":["PLAINTEXT://127.0.0.1:9092"],
                                                  "listener_security_protocol_map":
                                                      {"PLAINTEXT":"PLAINTEXT"},
                                                  "jmx_port":-1,"timestamp":"<ms>",
                                                  "rack":"r1"?, "features":{}}
    /brokers/topics/<topic>                      {"version":3,"topic_id":"<base64 uuid>",
                                                  "partitions":{"0":[1,2,3]},
                                                  "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<t>/partitions/<p>/state     {"version":1,"leader":1,"leader_epoch":4,
                                                  "controller_epoch":7,"isr":[1,2,3]}
    /config/topics/<topic>                       {"version":1,"config":{"retention.ms":"1000"}}
    /admin/delete_topics/<topic>                 (empty)
    /admin/reassign_partitions                   {"version":1,"partitions":[{"topic":"t",
                                                  "partition":0,"replicas":[2,3]}]}
    /latest_producer_id_block                    {"version":1,"broker":1,"block_start":"0",
                                                  "block_end":"999"}
    /admin/controlled_shutdown/<id> (ephemeral)  "<broker epoch>" (plain text; not Kafka's)

A broker's epoch is the czxid of its registration znode (a new registration after a lost
session is a new epoch); a partition state's version is the znode's version, which every
conditional update names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from storage_core.common import TopicPartition, Uuid
from storage_core.errors import StorageError

CLUSTER_ID_PATH = "/cluster/id"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
TOPIC_CONFIGS_PATH = "/config/topics"
DELETE_TOPICS_PATH = "/admin/delete_topics"
# Reassignments asked through ZooKeeper (deprecated in Kafka for the API, still honoured)
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
# Not in Kafka's layout: Kafka's brokers asked for a controlled shutdown with an RPC
# (ControlledShutdown, removed in 4.0); here a broker leaving creates an ephemeral
# /admin/controlled_shutdown/<broker id> holding its broker epoch, and the controller watches it.
CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"

# Created at a cluster's first start; everything else hangs below them.
PERSISTENT_PATHS = (
    BROKER_IDS_PATH,
    TOPICS_PATH,
    TOPIC_CONFIGS_PATH,
    DELETE_TOPICS_PATH,
    CONTROLLED_SHUTDOWN_PATH,
    "/cluster",
)

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader: the partition is offline
INITIAL_LEADER_EPOCH = 0
INITIAL_CONTROLLER_EPOCH = 0
BROKER_REGISTRATION_VERSION = 5
TOPIC_ASSIGNMENT_VERSION = 3

_ENDPOINT = re.compile(r"^(?P<listener>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


class ZNodeDataError(StorageError):
    """A znode holds data that is not what Kafka's layout puts there (hand-edited, or written
    by something else): names the path and what was wrong."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{partitions_path(tp.topic)}/{tp.partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS_PATH}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


@dataclass(frozen=True, slots=True, kw_only=True)
class EndPoint:
    """One advertised listener: ``PLAINTEXT://127.0.0.1:9092``."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistration:
    """The content of ``/brokers/ids/<id>``; ``broker_epoch`` is the znode's czxid (-1 until
    read back from ZooKeeper)."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    timestamp_ms: int = 0
    jmx_port: int = -1
    broker_epoch: int = -1

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError(f"broker {self.broker_id} registers no endpoint")

    def endpoint(self, listener: str) -> EndPoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerRegistration:
    """The content of ``/controller``; ``zk_version`` of the znode (-1 until read back)."""

    broker_id: int
    timestamp_ms: int = 0
    zk_version: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaAssignment:
    """A partition's assigned replicas in preference order (the first is the preferred leader)
    and, during a reassignment, the replicas being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"duplicate broker in replica assignment {list(self.replicas)}")

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment (ORS): all but those being added."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment completes (TRS): all but those being removed."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """The assignment while moving to ``target`` (Kafka's ``reassignTo``): RS = TRS + ORS
        (target first, in its order), AR = RS - ORS, RR = RS - TRS. A target equal to the
        original replicas (a cancellation) gives an assignment that is not reassigning."""
        origin = self.origin_replicas
        replicas = tuple(dict.fromkeys((*target, *origin)))
        return ReplicaAssignment(
            replicas=replicas,
            adding_replicas=tuple(r for r in replicas if r not in origin),
            removing_replicas=tuple(r for r in replicas if r not in target),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicAssignment:
    """The content of ``/brokers/topics/<topic>``: topic id and each partition's replicas."""

    topic: str
    topic_id: Uuid | None
    partitions: Mapping[int, ReplicaAssignment] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsr:
    """The content of a partition's ``state`` znode: leader (-1 = none), its epoch, the ISR,
    and the epoch of the controller that wrote it; ``zk_version`` of the znode (-1 until read
    back), named by every conditional update so that a stale writer fails."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1

    def __post_init__(self) -> None:
        if self.leader_epoch < 0:
            raise ValueError(f"negative leader epoch {self.leader_epoch}")
        if len(set(self.isr)) != len(self.isr):
            raise ValueError(f"duplicate broker in ISR {list(self.isr)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdBlock:
    """``/latest_producer_id_block``: the last block of producer ids handed to a broker
    (``block_start`` .. ``block_end``, both inclusive)."""

    broker_id: int
    block_start: int
    block_end: int

    def __post_init__(self) -> None:
        if self.block_end < self.block_start:
            raise ValueError(f"producer id block ends before it starts: {self}")


def _dumps(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _loads(path: str, data: bytes | None) -> dict[str, Any]:
    if not data:
        raise ZNodeDataError(f"{path} is empty; expected a JSON object")
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZNodeDataError(f"{path} does not hold JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ZNodeDataError(f"{path} holds {type(value).__name__}, expected a JSON object")
    return value


def _field(path: str, obj: Mapping[str, Any], key: str, kind: type) -> Any:
    value = obj.get(key)
    # bool is an int in Python, never in these layouts
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ZNodeDataError(f"{path}: field {key!r} is {value!r}, expected {kind.__name__}")
    return value


def _int_list(path: str, value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ZNodeDataError(f"{path}: {what} is {value!r}, expected a list of broker ids")
    return tuple(value)


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    return str(_field(CLUSTER_ID_PATH, _loads(CLUSTER_ID_PATH, data), "id", str))


def encode_controller(registration: ControllerRegistration) -> bytes:
    return _dumps(
        {
            "version": 2,
            "brokerid": registration.broker_id,
            "timestamp": str(registration.timestamp_ms),
            "kraftControllerEpoch": -1,
        }
    )


def decode_controller(data: bytes | None, *, zk_version: int = -1) -> ControllerRegistration:
    obj = _loads(CONTROLLER_PATH, data)
    timestamp = obj.get("timestamp", "0")
    return ControllerRegistration(
        broker_id=_field(CONTROLLER_PATH, obj, "brokerid", int),
        timestamp_ms=int(timestamp) if str(timestamp).isdigit() else 0,
        zk_version=zk_version,
    )


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    text = (data or b"").decode("ascii", errors="replace").strip()
    if not text.isdigit():
        raise ZNodeDataError(f"{CONTROLLER_EPOCH_PATH} holds {text!r}, expected a number")
    return int(text)


def encode_broker(registration: BrokerRegistration) -> bytes:
    plaintext = next(
        (e for e in registration.endpoints if e.security_protocol == "PLAINTEXT"), None
    )
    value: dict[str, Any] = {
        "version": BROKER_REGISTRATION_VERSION,
        # top-level host/port: the first PLAINTEXT endpoint, for old readers (Kafka's rule)
        "host": plaintext.host if plaintext else None,
        "port": plaintext.port if plaintext else -1,
        "endpoints": [e.connection_string() for e in registration.endpoints],
        "listener_security_protocol_map": {
            e.listener: e.security_protocol for e in registration.endpoints
        },
        "jmx_port": registration.jmx_port,
        "timestamp": str(registration.timestamp_ms),
        "features": {},
    }
    if registration.rack is not None:
        value["rack"] = registration.rack
    return _dumps(value)


def decode_broker(broker_id: int, data: bytes | None, *, czxid: int = -1) -> BrokerRegistration:
    path = broker_path(broker_id)
    obj = _loads(path, data)
    protocols = obj.get("listener_security_protocol_map") or {}
    endpoints = []
    for text in obj.get("endpoints") or []:
        match = _ENDPOINT.match(str(text))
        if match is None:
            raise ZNodeDataError(f"{path}: endpoint {text!r} is not LISTENER://host:port")
        listener = match["listener"]
        endpoints.append(
            EndPoint(
                listener=listener,
                host=match["host"],
                port=int(match["port"]),
                security_protocol=str(protocols.get(listener, listener)),
            )
        )
    if not endpoints:
        raise ZNodeDataError(f"{path} registers no endpoint")
    timestamp = str(obj.get("timestamp", "0"))
    rack = obj.get("rack")
    return BrokerRegistration(
        broker_id=broker_id,
        endpoints=tuple(endpoints),
        rack=str(rack) if rack is not None else None,
        timestamp_ms=int(timestamp) if timestamp.isdigit() else 0,
        jmx_port=int(obj.get("jmx_port", -1)),
        broker_epoch=czxid,
    )


def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    ordered = sorted(assignment.partitions.items())
    value: dict[str, Any] = {
        "version": TOPIC_ASSIGNMENT_VERSION,
        "partitions": {str(p): list(a.replicas) for p, a in ordered},
        "adding_replicas": {
            str(p): list(a.adding_replicas) for p, a in ordered if a.adding_replicas
        },
        "removing_replicas": {
            str(p): list(a.removing_replicas) for p, a in ordered if a.removing_replicas
        },
    }
    if assignment.topic_id is not None:
        value["topic_id"] = str(assignment.topic_id)
    return _dumps(value)


def decode_topic_assignment(topic: str, data: bytes | None) -> TopicAssignment:
    path = topic_path(topic)
    obj = _loads(path, data)
    topic_id = None
    if "topic_id" in obj:
        try:
            topic_id = Uuid.from_string(str(obj["topic_id"]))
        except ValueError as exc:
            raise ZNodeDataError(f"{path}: {exc}") from exc
    adding = obj.get("adding_replicas") or {}
    removing = obj.get("removing_replicas") or {}
    partitions = {}
    for key, replicas in (obj.get("partitions") or {}).items():
        if not str(key).isdigit():
            raise ZNodeDataError(f"{path}: partition {key!r} is not a number")
        try:
            partitions[int(key)] = ReplicaAssignment(
                replicas=_int_list(path, replicas, f"replicas of partition {key}"),
                adding_replicas=_int_list(path, adding.get(key, []), "adding_replicas"),
                removing_replicas=_int_list(path, removing.get(key, []), "removing_replicas"),
            )
        except ValueError as exc:
            raise ZNodeDataError(f"{path}: {exc}") from exc
    return TopicAssignment(topic=topic, topic_id=topic_id, partitions=partitions)


def encode_leader_and_isr(state: LeaderAndIsr) -> bytes:
    return _dumps(
        {
            "version": 1,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "controller_epoch": state.controller_epoch,
            "isr": list(state.isr),
        }
    )


def decode_leader_and_isr(
    tp: TopicPartition, data: bytes | None, *, zk_version: int = -1
) -> LeaderAndIsr:
    path = partition_state_path(tp)
    obj = _loads(path, data)
    try:
        return LeaderAndIsr(
            leader=_field(path, obj, "leader", int),
            leader_epoch=_field(path, obj, "leader_epoch", int),
            isr=_int_list(path, obj.get("isr"), "isr"),
            controller_epoch=_field(path, obj, "controller_epoch", int),
            zk_version=zk_version,
        )
    except ValueError as exc:
        raise ZNodeDataError(f"{path}: {exc}") from exc


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(sorted(configs.items()))})


def decode_topic_config(topic: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    path = topic_config_path(topic)
    config = _loads(path, data).get("config") or {}
    if not isinstance(config, dict):
        raise ZNodeDataError(f"{path}: 'config' is {config!r}, expected an object")
    return {str(k): str(v) for k, v in config.items()}


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _dumps(
        {
            "version": 1,
            "broker": block.broker_id,
            "block_start": str(block.block_start),
            "block_end": str(block.block_end),
        }
    )


def decode_producer_id_block(data: bytes | None) -> ProducerIdBlock:
    obj = _loads(PRODUCER_ID_BLOCK_PATH, data)
    try:
        return ProducerIdBlock(
            broker_id=_field(PRODUCER_ID_BLOCK_PATH, obj, "broker", int),
            block_start=int(_field(PRODUCER_ID_BLOCK_PATH, obj, "block_start", str)),
            block_end=int(_field(PRODUCER_ID_BLOCK_PATH, obj, "block_end", str)),
        )
    except ValueError as exc:
        raise ZNodeDataError(f"{PRODUCER_ID_BLOCK_PATH}: {exc}") from exc


def encode_partition_reassignment(reassignments: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    """``/admin/reassign_partitions`` (Kafka's ``ReassignPartitionsZNode``)."""
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
                for tp, replicas in sorted(reassignments.items())
            ],
        }
    )


def decode_partition_reassignment(data: bytes | None) -> dict[TopicPartition, tuple[int, ...]]:
    path = REASSIGN_PARTITIONS_PATH
    entries = _loads(path, data).get("partitions") or []
    if not isinstance(entries, list):
        raise ZNodeDataError(f"{path}: 'partitions' is {entries!r}, expected a list")
    reassignments = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ZNodeDataError(f"{path}: partition entry {entry!r} is not an object")
        tp = TopicPartition(
            _field(path, entry, "topic", str), _field(path, entry, "partition", int)
        )
        reassignments[tp] = _int_list(path, entry.get("replicas"), f"replicas of {tp}")
    return reassignments
