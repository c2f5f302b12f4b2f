"""The least ACLs the pipeline's principal needs on a cluster with an authorizer.

Measured, not guessed: every job (copy_segments, expire_remote, delete_partitions, reconcile,
quality, cluster_status, preferred_leader_election, backup_consumer_offsets, restore_topic) and
the partition_deletion DAG's own DeleteTopics ran against a broker with
``kafka.authorizer.logger`` at DEBUG, and these are exactly the (operation, resource) pairs the
broker checked for the pipeline's principal
(tests/integration/security/test_pipeline_principal.py runs them green with only these, and
fails naming the ACL when one is missing). As ``storage-core acls`` commands (``*`` is every
topic or every group, as the jobs discover remote-enabled topics and groups themselves)::

    storage-core acls --add --allow-principal User:pipeline --operation Describe --topic '*'
    storage-core acls --add --allow-principal User:pipeline --operation DescribeConfigs --topic '*'
    storage-core acls --add --allow-principal User:pipeline --operation Describe --cluster
    storage-core acls --add --allow-principal User:pipeline --operation DescribeConfigs --cluster
    storage-core acls --add --allow-principal User:pipeline --operation Read \\
        --topic __remote_log_metadata
    storage-core acls --add --allow-principal User:pipeline --operation Write \\
        --topic __remote_log_metadata
    storage-core acls --add --allow-principal User:pipeline --operation Describe --group '*'
    storage-core acls --add --allow-principal User:pipeline --operation Delete --topic '*'
    storage-core acls --add --allow-principal User:pipeline --operation Alter --cluster
    storage-core acls --add --allow-principal User:pipeline --operation Create --topic '*'
    storage-core acls --add --allow-principal User:pipeline --operation AlterConfigs --topic '*'
    storage-core acls --add --allow-principal User:pipeline --operation Read --group '*'
    storage-core acls --add --allow-principal User:pipeline --operation Read --topic '*'

The first seven are ``PIPELINE_ACLS``, what the scheduled DAGs need (Describe on every group:
retention_nightly's backup_consumer_offsets finds each group's coordinator and reads its
committed offsets, FindCoordinator and OffsetFetch; ListGroups lists every group with Describe
on the cluster). The others serve only the on-demand DAGs: the partition_deletion DAG
(DeleteTopics), the preferred_leader_election DAG (ElectLeaders), the restore_topic DAG
(``RESTORE_TOPIC_ACLS``: CreateTopics of the target, Create on the topic as Kafka allows in
place of Create on the cluster; IncrementalAlterConfigs of its restore configs) and its
``restore_offsets`` (``RESTORE_OFFSETS_ACLS``: OffsetCommit, which Kafka's KafkaApis checks as
Read on the group and Read, not Describe, on each topic committed; the target is named at
trigger time, hence every topic). As in Kafka, Read, Write, Delete and Alter imply Describe and
AlterConfigs implies DescribeConfigs (``IMPLIED_BY``): with every ACL here granted, Describe on
topics, groups and the cluster, DescribeConfigs on topics and Read on ``__remote_log_metadata``
add nothing.

The restore_drill DAG (``RESTORE_DRILL_ACLS``) creates, alters and deletes only its scratch
topics, so those three are PREFIXED ACLs on ``restore-drill-``
(``--resource-pattern-type PREFIXED``), never on every topic; it also needs Delete on groups
(OffsetDelete of the offsets its restore committed) and Read on groups and topics
(tests/integration/security/test_restore_drill_acls.py runs it green with these and the
scheduled DAGs' ACLs, and fails naming Create or Delete on ``restore-drill-`` without them).

Nothing else is checked: no IdempotentWrite (the metadata producer is not idempotent), no
DeleteRecords (expiry moves the log start through the metadata topic, which the brokers read),
no Create on the cluster (the brokers create the metadata topic), no group but for the offsets
backup and restore (the jobs' consumers assign partitions and commit nothing). The jobs'
Metadata requests list every topic: a topic the principal may not describe is left out of the
answer, so without Describe on a topic the jobs do not see it (a job named one with ``--topic``
fails naming the ACL).

Each is an ALLOW from any host for ``User:<login of the tiered-storage connection>``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
EVERY_TOPIC = "*"
EVERY_GROUP = "*"
RESOURCE_TYPES = ("topic", "group", "cluster")
"""Kafka's resource types the pipeline's ACLs name (``storage-core acls`` ``--topic``,
``--group``, ``--cluster``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineAcl:
    """One ACL: ``operation`` (Kafka's name: Describe, Read...) on a ``resource_type``
    (``topic``, ``group`` or ``cluster``) named ``name`` (literal; ``*`` every topic or group;
    nothing for the cluster), and why."""

    operation: str
    resource_type: str
    name: str = ""
    reason: str = ""
    needed_by: tuple[str, ...] = ()
    """The jobs (and DAG tasks) whose requests the broker checks against it."""
    prefixed: bool = False
    """A PREFIXED pattern: every name that starts with ``name`` (LITERAL otherwise)."""

    def __post_init__(self) -> None:
        if self.resource_type not in RESOURCE_TYPES:
            raise ValueError(
                f"resource type {self.resource_type!r}: expected one of {', '.join(RESOURCE_TYPES)}"
            )
        if (self.resource_type != "cluster") != bool(self.name):
            raise ValueError(
                "a topic or group ACL names its topic or group; a cluster ACL names nothing"
            )

    def acls_arguments(self) -> list[str]:
        """The resource and operation as ``storage-core acls`` (kafka-acls.sh) takes them."""
        if self.resource_type == "cluster":
            return ["--operation", self.operation, "--cluster"]
        pattern = ["--resource-pattern-type", "PREFIXED"] if self.prefixed else []
        return ["--operation", self.operation, f"--{self.resource_type}", self.name, *pattern]

    def command(self, principal: str = "User:pipeline") -> str:
        """The ``storage-core acls --add`` command line that grants it to ``principal``."""
        return shlex.join(
            [
                "storage-core",
                "acls",
                "--add",
                "--allow-principal",
                principal,
                *self.acls_arguments(),
            ]
        )


DESCRIBE_TOPICS = PipelineAcl(
    operation="Describe",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="Metadata and ListOffsets of the topics the jobs find remote-enabled",
    needed_by=(
        "copy_segments",
        "expire_remote",
        "delete_partitions",
        "reconcile",
        "quality",
        "cluster_status",
        "preferred_leader_election",
        "partition_deletion.mark_partitions",
    ),
)
DESCRIBE_TOPIC_CONFIGS = PipelineAcl(
    operation="DescribeConfigs",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="remote.storage.enable and the retention settings of each topic",
    needed_by=(
        "copy_segments",
        "expire_remote",
        "quality",
        "cluster_status",
        "partition_deletion.mark_partitions",
    ),
)
DESCRIBE_CLUSTER = PipelineAcl(
    operation="Describe",
    resource_type="cluster",
    reason="DescribeLogDirs: which broker's log dir holds each partition",
    needed_by=("copy_segments", "expire_remote"),
)
DESCRIBE_CLUSTER_CONFIGS = PipelineAcl(
    operation="DescribeConfigs",
    resource_type="cluster",
    reason="each broker's remote.log.manager.copy.max.bytes.per.second (KIP-956 copy quota)",
    needed_by=("copy_segments",),
)
READ_REMOTE_LOG_METADATA = PipelineAcl(
    operation="Read",
    resource_type="topic",
    name=REMOTE_LOG_METADATA_TOPIC,
    reason="Fetch: the remote segments' metadata",
    needed_by=(
        "copy_segments",
        "expire_remote",
        "delete_partitions",
        "reconcile",
        "quality",
        "cluster_status",
    ),
)
WRITE_REMOTE_LOG_METADATA = PipelineAcl(
    operation="Write",
    resource_type="topic",
    name=REMOTE_LOG_METADATA_TOPIC,
    reason="Produce: segment copies and deletions, partition deletions",
    needed_by=("copy_segments", "expire_remote", "delete_partitions", "reconcile (repairs)"),
)
DELETE_TOPICS = PipelineAcl(
    operation="Delete",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="DeleteTopics of the partition_deletion DAG",
    needed_by=("partition_deletion.mark_partitions",),
)
DESCRIBE_GROUPS = PipelineAcl(
    operation="Describe",
    resource_type="group",
    name=EVERY_GROUP,
    reason="FindCoordinator and OffsetFetch: every group's committed offsets",
    needed_by=("backup_consumer_offsets", "restore_topic --restore-offsets (FindCoordinator)"),
)
ALTER_CLUSTER = PipelineAcl(
    operation="Alter",
    resource_type="cluster",
    reason="ElectLeaders of the preferred_leader_election DAG",
    needed_by=("preferred_leader_election",),
)

CREATE_TOPICS = PipelineAcl(
    operation="Create",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="CreateTopics of the restore_topic DAG's target (named at trigger time)",
    needed_by=("restore_topic",),
)
ALTER_TOPIC_CONFIGS = PipelineAcl(
    operation="AlterConfigs",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="IncrementalAlterConfigs: the target's remote.log.restore.* configs set and removed",
    needed_by=("restore_topic",),
)
READ_GROUPS = PipelineAcl(
    operation="Read",
    resource_type="group",
    name=EVERY_GROUP,
    reason="OffsetCommit: the groups' backed-up offsets committed in the target",
    needed_by=("restore_topic --restore-offsets",),
)
READ_TOPICS = PipelineAcl(
    operation="Read",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="OffsetCommit: Kafka checks Read on each topic committed (the target)",
    needed_by=("restore_topic --restore-offsets",),
)

PIPELINE_ACLS: tuple[PipelineAcl, ...] = (
    DESCRIBE_TOPICS,
    DESCRIBE_TOPIC_CONFIGS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CLUSTER_CONFIGS,
    READ_REMOTE_LOG_METADATA,
    WRITE_REMOTE_LOG_METADATA,
    DESCRIBE_GROUPS,
)
"""What the scheduled DAGs need (tiering, retention_nightly, data_quality,
partition_deletion_sweep)."""
PARTITION_DELETION_ACLS: tuple[PipelineAcl, ...] = (DELETE_TOPICS,)
LEADER_ELECTION_ACLS: tuple[PipelineAcl, ...] = (ALTER_CLUSTER,)
RESTORE_TOPIC_ACLS: tuple[PipelineAcl, ...] = (CREATE_TOPICS, ALTER_TOPIC_CONFIGS)
"""The restore_topic DAG's (its dry run needs none of them)."""
RESTORE_OFFSETS_ACLS: tuple[PipelineAcl, ...] = (READ_GROUPS, READ_TOPICS)
"""The restore_topic DAG's with ``restore_offsets`` (its default)."""

DRILL_SCRATCH_PREFIX = "restore-drill-"  # jobs.planning.restore_drill.SCRATCH_PREFIX
CREATE_DRILL_TOPICS = PipelineAcl(
    operation="Create",
    resource_type="topic",
    name=DRILL_SCRATCH_PREFIX,
    prefixed=True,
    reason="CreateTopics of the restore drill's scratch topics",
    needed_by=("restore_drill",),
)
ALTER_DRILL_TOPIC_CONFIGS = PipelineAcl(
    operation="AlterConfigs",
    resource_type="topic",
    name=DRILL_SCRATCH_PREFIX,
    prefixed=True,
    reason="IncrementalAlterConfigs: a scratch topic's remote.log.restore.* configs",
    needed_by=("restore_drill",),
)
DELETE_DRILL_TOPICS = PipelineAcl(
    operation="Delete",
    resource_type="topic",
    name=DRILL_SCRATCH_PREFIX,
    prefixed=True,
    reason="DeleteTopics of the restore drill's scratch topics",
    needed_by=("restore_drill",),
)
DELETE_GROUPS = PipelineAcl(
    operation="Delete",
    resource_type="group",
    name=EVERY_GROUP,
    reason="OffsetDelete: the groups' offsets the drill's restore committed under a scratch topic",
    needed_by=("restore_drill",),
)
RESTORE_DRILL_ACLS: tuple[PipelineAcl, ...] = (
    CREATE_DRILL_TOPICS,
    ALTER_DRILL_TOPIC_CONFIGS,
    DELETE_DRILL_TOPICS,
    DELETE_GROUPS,
    READ_GROUPS,
    READ_TOPICS,
)
"""The restore_drill DAG's: Create, AlterConfigs and Delete on its scratch topics only (a
PREFIXED ACL on ``restore-drill-``), Delete on groups (OffsetDelete, which Kafka checks as
Delete on the group and Read on the topic), and Read on groups and topics: OffsetCommit of the
restored offsets and the Fetches that compare every source partition drilled with its
scratch copy (every topic: the sample rotates over all of them)."""
ALL_PIPELINE_ACLS: tuple[PipelineAcl, ...] = (
    PIPELINE_ACLS
    + PARTITION_DELETION_ACLS
    + LEADER_ELECTION_ACLS
    + RESTORE_TOPIC_ACLS
    + RESTORE_OFFSETS_ACLS
)
"""Every DAG's, the on-demand partition_deletion, preferred_leader_election and restore_topic
included."""
IMPLIED_BY: dict[PipelineAcl, tuple[PipelineAcl, ...]] = {
    DESCRIBE_TOPICS: (DELETE_TOPICS, READ_TOPICS),
    DESCRIBE_TOPIC_CONFIGS: (ALTER_TOPIC_CONFIGS,),
    DESCRIBE_CLUSTER: (ALTER_CLUSTER,),
    READ_REMOTE_LOG_METADATA: (READ_TOPICS,),
    DESCRIBE_GROUPS: (READ_GROUPS,),
}
"""Kafka's implied operations (its AclAuthorizer, storage_core.security.authorizer): Read,
Write, Delete and Alter on a resource allow Describe on it, AlterConfigs DescribeConfigs, and
an ACL on ``*`` covers every name; with the on-demand DAGs' ACLs granted, these add nothing."""
