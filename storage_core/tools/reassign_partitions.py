"""``storage-core reassign-partitions``: ``kafka-reassign-partitions.sh`` over
AlterPartitionReassignments and ListPartitionReassignments.

    --execute --reassignment-json-file F   print the current assignment (to roll back with),
                                           then start the reassignments in F
    --verify  --reassignment-json-file F   completed, still in progress, or not as F says
    --list                                 the reassignments in progress
    --cancel  --reassignment-json-file F   cancel those of F still in progress

The file is Kafka's reassignment JSON (version 1; ``log_dirs``, when present, may only say
"any": moving replicas between a broker's log dirs is not supported):

    {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3],"log_dirs":["any","any"]}]}

Output and error messages are Kafka's.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from kio.schema.errors import ErrorCode

from storage_core.client.admin import KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.reassignments import (
    PartitionReassignment,
    ReassignmentResult,
    alter_partition_reassignments,
    list_partition_reassignments,
)
from storage_core.common import TopicPartition
from storage_core.errors import StorageError

ANY_LOG_DIR = "any"
MAX_PARTITIONS = 10_000  # one AlterPartitionReassignments request, as the broker bounds it
ACTIONS = ("execute", "verify", "list", "cancel")
CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to"
    " override this and create a new partition assignment in addition to the existing one."
    " The --additional flag can also be used to change the throttle by resubmitting the"
    " current reassignment."
)


class ReassignmentCommandError(StorageError):
    """The command cannot go on (a bad file, an unknown broker or partition, a refused
    reassignment); the message is what ``kafka-reassign-partitions.sh`` would print."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionReassignmentState:
    """``--verify``'s view of one partition: its replicas now, the file's target, and whether
    no reassignment of it is in progress."""

    current_replicas: tuple[int, ...]
    target_replicas: tuple[int, ...]
    done: bool


def parse_reassignment_json(text: str) -> dict[TopicPartition, tuple[int, ...]]:
    """Kafka's reassignment JSON -> target replicas by partition, in the file's order; refuses
    what ``kafka-reassign-partitions.sh`` refuses."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReassignmentCommandError(f"the reassignment file is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ReassignmentCommandError("the reassignment file must hold a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise ReassignmentCommandError(f"Not supported version field value {version}")
    entries = data.get("partitions", [])
    if not isinstance(entries, list):
        raise ReassignmentCommandError("'partitions' must be a list")
    if len(entries) > MAX_PARTITIONS:
        raise ReassignmentCommandError(
            f"{len(entries)} partitions in one reassignment; at most {MAX_PARTITIONS}"
        )
    parsed: list[tuple[TopicPartition, tuple[int, ...]]] = [_parse_entry(e) for e in entries]
    if not parsed:
        raise ReassignmentCommandError("Partition reassignment list cannot be empty")
    if any(not replicas for _tp, replicas in parsed):
        raise ReassignmentCommandError("Partition replica list cannot be empty")
    counts = Counter(tp for tp, _replicas in parsed)
    duplicates = sorted(tp for tp, count in counts.items() if count > 1)
    if duplicates:
        raise ReassignmentCommandError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(str(tp) for tp in duplicates)
        )
    repeated = [
        f"{tp} contains multiple entries for "
        + ",".join(str(r) for r in sorted({r for r in replicas if replicas.count(r) > 1}))
        for tp, replicas in parsed
        if len(set(replicas)) != len(replicas)
    ]
    if repeated:
        raise ReassignmentCommandError(
            "Partition replica lists may not contain duplicate entries: " + ". ".join(repeated)
        )
    return dict(parsed)


def _parse_entry(entry: Any) -> tuple[TopicPartition, tuple[int, ...]]:
    if not isinstance(entry, dict):
        raise ReassignmentCommandError(f"a partition entry must be a JSON object: {entry!r}")
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not topic:
        raise ReassignmentCommandError(f"'topic' must be a topic name: {entry!r}")
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ReassignmentCommandError(f"'partition' must be a partition number: {entry!r}")
    if not isinstance(replicas, list) or not all(
        isinstance(r, int) and not isinstance(r, bool) for r in replicas
    ):
        raise ReassignmentCommandError(f"'replicas' must be a list of broker ids: {entry!r}")
    tp = TopicPartition(topic, partition)
    log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
    if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
        raise ReassignmentCommandError(
            f"Size of replicas list {replicas} is different from size of log dirs list"
            f" {log_dirs} for partition {tp}"
        )
    if any(d != ANY_LOG_DIR for d in log_dirs):
        raise ReassignmentCommandError(
            f"partition {tp}: moving replicas between log dirs is not supported; give"
            f' "log_dirs" as "{ANY_LOG_DIR}" or leave it out'
        )
    return tp, tuple(replicas)


def format_reassignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson``: compact, sorted by topic then partition."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "replicas": list(assignment[tp]),
                    "log_dirs": [ANY_LOG_DIR] * len(assignment[tp]),
                }
                for tp in sorted(assignment)
            ],
        },
        separators=(",", ":"),
    )


def format_current_assignment(current: Mapping[TopicPartition, Sequence[int]]) -> str:
    return (
        f"Current partition replica assignment\n\n{format_reassignment_json(current)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )


def format_reassignment_states(states: Mapping[TopicPartition, PartitionReassignmentState]) -> str:
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        state = states[tp]
        if not state.done:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif state.current_replicas == state.target_replicas:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {tp}, but replica set is"
                f" {_ids(state.current_replicas)} rather than {_ids(state.target_replicas)}."
            )
    return "\n".join(lines)


def format_current_reassignments(ongoing: Mapping[TopicPartition, PartitionReassignment]) -> str:
    if not ongoing:
        return "No partition reassignments found."
    lines = ["Current partition reassignments:"]
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{tp}: replicas: {_ids(r.replicas)}."
        if r.adding_replicas:
            line += f" adding: {_ids(r.adding_replicas)}."
        if r.removing_replicas:
            line += f" removing: {_ids(r.removing_replicas)}."
        lines.append(line)
    return "\n".join(lines)


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def _errors_text(results: Mapping[TopicPartition, ReassignmentResult]) -> str:
    return "\n".join(
        f"{tp}: {results[tp].message or results[tp].error.name.upper()}"
        for tp in sorted(results)
        if results[tp].error != ErrorCode.none
    )


def current_replicas(
    admin: KafkaAdminClient, partitions: Sequence[TopicPartition]
) -> dict[TopicPartition, tuple[int, ...]]:
    """Each partition's replicas as the cluster's metadata shows them."""
    described = {
        t.name: t for t in admin.describe_topic_partitions(sorted({p.topic for p in partitions}))
    }
    current: dict[TopicPartition, tuple[int, ...]] = {}
    for tp in partitions:
        topic = described.get(tp.topic)
        found = None
        if topic is not None and topic.error == ErrorCode.none:
            found = next((p for p in topic.partitions if p.partition == tp.partition), None)
        if found is None:
            raise ReassignmentCommandError(f"Unable to find partition: {tp}")
        current[tp] = tuple(found.replicas)
    return current


def execute(
    cluster: KafkaCluster,
    out: TextIO,
    targets: Mapping[TopicPartition, Sequence[int]],
    *,
    additional: bool = False,
    allow_replication_factor_change: bool = True,
) -> None:
    if not additional and list_partition_reassignments(cluster):
        raise ReassignmentCommandError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    brokers = {b.node_id for b in cluster.refresh_metadata([]).brokers}
    unknown = sorted({r for replicas in targets.values() for r in replicas} - brokers)
    if unknown:
        raise ReassignmentCommandError(f"Unknown broker id {unknown[0]}")
    current = current_replicas(KafkaAdminClient(cluster), list(targets))
    print(format_current_assignment(current), file=out)
    results = alter_partition_reassignments(
        cluster, targets, allow_replication_factor_change=allow_replication_factor_change
    )
    failed = _errors_text(results)
    if failed:
        raise ReassignmentCommandError(f"Error reassigning partition(s):\n{failed}")
    names = ",".join(str(tp) for tp in sorted(targets))
    plural = "" if len(targets) == 1 else "s"
    print(f"Successfully started partition reassignment{plural} for {names}", file=out)


def verify(
    cluster: KafkaCluster, out: TextIO, targets: Mapping[TopicPartition, Sequence[int]]
) -> dict[TopicPartition, PartitionReassignmentState]:
    ongoing = list_partition_reassignments(cluster, list(targets))
    current = current_replicas(KafkaAdminClient(cluster), list(targets))
    states = {
        tp: PartitionReassignmentState(
            current_replicas=current[tp], target_replicas=tuple(target), done=tp not in ongoing
        )
        for tp, target in targets.items()
    }
    print(format_reassignment_states(states), file=out)
    return states


def cancel(cluster: KafkaCluster, out: TextIO, targets: Sequence[TopicPartition]) -> None:
    ongoing = sorted(list_partition_reassignments(cluster, list(targets)))
    if not ongoing:
        print("None of the specified partition reassignments are active.", file=out)
        return
    results = alter_partition_reassignments(cluster, dict.fromkeys(ongoing))
    failed = _errors_text(results)
    if failed:
        plural = "" if sum(r.error != ErrorCode.none for r in results.values()) == 1 else "s"
        raise ReassignmentCommandError(
            f"Error cancelling partition reassignment{plural} for:\n{failed}"
        )
    plural = "" if len(ongoing) == 1 else "s"
    names = ",".join(str(tp) for tp in ongoing)
    print(f"Successfully cancelled partition reassignment{plural} for: {names}", file=out)


def run_reassign_partitions(
    action: str,
    *,
    bootstrap_server: str,
    connection_config: ConnectionConfig | None = None,
    reassignment_json: str | None,
    out: TextIO,
    additional: bool = False,
    allow_replication_factor_change: bool = True,
) -> int:
    """Run one action; errors raise ``StorageError`` (the CLI prints them, exit code 1)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")
    targets: dict[TopicPartition, tuple[int, ...]] = {}
    if action != "list":
        if reassignment_json is None:
            raise ValueError(f"--{action} needs --reassignment-json-file")
        targets = parse_reassignment_json(reassignment_json)
    with KafkaCluster(bootstrap_server, config=connection_config) as cluster:
        if action == "list":
            print(format_current_reassignments(list_partition_reassignments(cluster)), file=out)
        elif action == "execute":
            execute(
                cluster,
                out,
                targets,
                additional=additional,
                allow_replication_factor_change=allow_replication_factor_change,
            )
        elif action == "verify":
            verify(cluster, out, targets)
        else:
            cancel(cluster, out, list(targets))
    return 0
