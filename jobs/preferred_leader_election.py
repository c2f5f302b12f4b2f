"""preferred_leader_election: give each partition of a topic back to its preferred replica.

    python -m jobs.preferred_leader_election --bootstrap-server HOST:PORT[,HOST:PORT...]
        --topic NAME [--partition N ...] [--summary-path PATH] [--dry-run]

ElectLeaders (election type PREFERRED) through the controller, as Kafka's
``kafka-leader-election --election-type PREFERRED`` does. The preferred replica is the first
of a partition's assignment; it is elected only where it is alive and in the ISR.

Per partition (a ``partition=<tp> event=election result=...`` line and a summary entry with
the leader before and after)::

    elected             the preferred replica leads now
    already_preferred   it led already (ELECTION_NOT_NEEDED): nothing changed
    error               the controller's error (e.g. PREFERRED_LEADER_NOT_AVAILABLE: the
                        preferred replica is down or not in sync) and its message

Without ``--partition``, every partition of the topic. A topic that does not exist or a
partition it does not have is refused before anything is asked (the message names
``--topic`` or ``--partition``). ``--dry-run`` reports which partitions are led by another
replica than their preferred one and elects nothing. Exit 1 when a partition's election
failed. Counts: ``partitions``, ``elected``, ``already_preferred``, ``errors`` (and
``not_preferred`` for a dry run).
"""

from __future__ import annotations

import argparse

from kio.schema.errors import ErrorCode

from jobs.common import (
    JobArgs,
    JobArgumentError,
    RunSummary,
    job_parser,
    log_partition,
    parse_job_args,
    run_job,
)
from jobs.common.clients import kafka_cluster
from storage_core.client.elections import ElectionType, elect_leaders
from storage_core.client.metadata import NO_LEADER, TopicMetadata
from storage_core.common import TopicPartition

JOB = "preferred_leader_election"
PARTITIONS_MAX = 10_000
ELECTION_TIMEOUT_MS = 30_000


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group("preferred_leader_election")
    own.add_argument(
        "--partition",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="a partition of --topic (repeatable; default every partition of the topic)",
    )
    return parser


def requested_partitions(
    args: JobArgs, topic: TopicMetadata | None
) -> tuple[TopicMetadata, list[int]]:
    """The topic and the partitions to elect, checked against it; ``JobArgumentError`` names
    the option that is wrong."""
    if args.topic is None:
        raise JobArgumentError("--topic is required: the topic whose leaders to elect")
    if topic is None or topic.error == ErrorCode.unknown_topic_or_partition:
        raise JobArgumentError(f"--topic {args.topic!r}: no such topic in the cluster")
    topic.raise_for_error()
    existing = sorted(p.partition for p in topic.partitions)
    given = args.options.get("partition")
    asked = [int(p) for p in given] if isinstance(given, list) else []
    if len(asked) > PARTITIONS_MAX:
        raise JobArgumentError(f"--partition given {len(asked)} times: at most {PARTITIONS_MAX}")
    unknown = sorted(set(asked) - set(existing))
    if unknown:
        raise JobArgumentError(
            f"--partition {', '.join(str(p) for p in unknown)}: topic {args.topic!r} has"
            f" partitions 0..{len(existing) - 1}"
        )
    return topic, sorted(set(asked)) if asked else existing


def elect(args: JobArgs, summary: RunSummary) -> None:
    with kafka_cluster(args) as cluster:
        topic_name = args.topic or ""
        metadata = cluster.refresh_metadata([topic_name] if args.topic else [])
        topic, partitions = requested_partitions(args, metadata.topic(topic_name))
        before = {p.partition: p for p in topic.partitions}
        summary.details["topic"] = topic_name
        summary.count("partitions", len(partitions))
        if args.dry_run:
            for index in partitions:
                described = before[index]
                preferred = described.replicas[0] if described.replicas else None
                leader = None if described.leader_id == NO_LEADER else described.leader_id
                result = "already_preferred" if leader == preferred else "not_preferred"
                summary.count(result)
                summary.partition(
                    TopicPartition(topic_name, index),
                    result,
                    leader=leader,
                    preferred_leader=preferred,
                )
                log_partition(
                    "election",
                    f"{topic_name}-{index}",
                    result=result,
                    leader=leader,
                    preferred_leader=preferred,
                    dry_run=True,
                )
            return
        answers = elect_leaders(
            cluster,
            [TopicPartition(topic_name, p) for p in partitions],
            election_type=ElectionType.PREFERRED,
            timeout_ms=ELECTION_TIMEOUT_MS,
        )
        after = cluster.refresh_metadata([topic_name]).topic(topic_name)
        for index in partitions:
            tp = TopicPartition(topic_name, index)
            described = before[index]
            preferred = described.replicas[0] if described.replicas else None
            now = after.partition(index) if after is not None else None
            fields: dict[str, object] = {
                "preferred_leader": preferred,
                "leader_before": None if described.leader_id == NO_LEADER else described.leader_id,
                "leader": None if now is None or now.leader_id == NO_LEADER else now.leader_id,
                "leader_epoch": None if now is None else now.leader_epoch,
            }
            answer = answers.get(tp)
            if answer is not None and answer.error == ErrorCode.none:
                result = "elected"
            elif answer is not None and answer.error == ErrorCode.election_not_needed:
                result = "already_preferred"
            else:
                result = "error"
                text = (
                    "the controller did not answer for this partition"
                    if answer is None
                    else f"{answer.error.name.upper()}: {answer.message or ''}".rstrip(": ")
                )
                summary.error(text, tp)
                fields["error"] = text
            if result != "error":
                summary.count(result)
            summary.partition(tp, result, **fields)
            log_partition("election", tp, result=result, **fields)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    args = parse_job_args(build_parser(), argv, job=JOB)
    return run_job(args, lambda summary: elect(args, summary))


if __name__ == "__main__":
    import sys

    sys.exit(main())
