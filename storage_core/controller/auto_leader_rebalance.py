"""The controller's auto leader rebalance (Kafka's ZooKeeper-mode
``KafkaController.checkAndTriggerAutoLeaderRebalance``, run every
``leader.imbalance.check.interval.seconds`` when ``auto.leader.rebalance.enable``).

A broker's imbalance is the share of the partitions it prefers (it is the first replica of
their assignment) that others lead. Above ``leader.imbalance.per.broker.percentage``, each of
those partitions where it is live and in the ISR gets a preferred-replica election through the
partition state machine. Partitions of topics being deleted are left out. Only the controller's
event thread calls it: no lock.
"""

from __future__ import annotations

import logging

from storage_core.common import TopicPartition
from storage_core.controller.controller_context import ControllerContext
from storage_core.controller.partition_state_machine import PartitionStateMachine

# the controller's lines keep the logger they had before its state machines had modules
logger = logging.getLogger("storage_core.controller.kafka_controller")


def check_and_trigger_auto_leader_rebalance(
    ctx: ControllerContext,
    partition_state_machine: PartitionStateMachine,
    *,
    leader_imbalance_per_broker_percentage: int,
) -> None:
    """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, if more than
    ``leader.imbalance.per.broker.percentage`` of the partitions it prefers are led by
    others, elect it where it is live and in sync."""
    partition_state_machine.refresh_states(
        tp for tp in ctx.assignments if tp.topic not in ctx.topics_to_delete
    )
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp, assignment in ctx.assignments.items():
        if assignment.replicas and tp in ctx.states and tp.topic not in ctx.topics_to_delete:
            by_preferred.setdefault(assignment.replicas[0], []).append(tp)
    to_elect = []
    for broker_id, partitions in sorted(by_preferred.items()):
        if broker_id not in ctx.live_broker_ids:
            continue
        not_led = [tp for tp in partitions if ctx.states[tp].leader != broker_id]
        ratio = len(not_led) / len(partitions)
        if ratio * 100 > leader_imbalance_per_broker_percentage:
            to_elect += [tp for tp in not_led if broker_id in ctx.states[tp].isr]
    if to_elect:
        logger.info("auto leader rebalance, partitions=%s", [str(tp) for tp in to_elect])
        partition_state_machine.elect_leaders(sorted(to_elect), unclean=False)
