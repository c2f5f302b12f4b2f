"""Cluster metadata: topics, topic ids, partition assignments and leader epochs.

Kafka's ZooKeeper-mode controller, one class per module:

    kafka_controller         KafkaController: the event-processing core (controller election
                             and failover, broker, topic and partition changes) and its API
    event_manager            EventManager (Kafka's ControllerEventManager): the event thread
    controller_context       ControllerContext: what the active controller knows
    partition_state_machine  PartitionStateMachine: first states, offline and ElectLeaders
                             elections, conditional state writes
    replica_state_machine    ReplicaStateMachine: replicas going offline leave the ISRs
    election                 the election strategies (PartitionLeaderElectionAlgorithms)
    topic_deletion_manager   TopicDeletionManager: topics marked for deletion
    reassignment_manager     PartitionReassignmentManager: KIP-455 reassignments
    reassignment             the reassignment rules (validation, target, completion)
    controlled_shutdown      ControlledShutdownManager: a broker asking to leave
    auto_leader_rebalance    checkAndTriggerAutoLeaderRebalance
    replica_assignment       AdminUtils.assignReplicasToBrokers: where new replicas go
    manual_assignment        manual assignments of CreateTopics and CreatePartitions, checked
    producer_id_manager      ProducerIdManager: producer id blocks for InitProducerId
    legacy_topic_metadata    a single broker's topic-metadata.json, moved into the store once

What the controller reads and writes in ZooKeeper goes through ``storage_core.zk`` (Kafka's
``kafka.zk``).

How decisions reach the brokers: through ZooKeeper itself. Kafka's ZooKeeper mode pushed them
with LeaderAndIsr / UpdateMetadata / StopReplica requests, RPCs Kafka 4.0 removed and the
protocol library here does not have. The brokers instead watch what the controller writes
(``/brokers/ids``, ``/brokers/topics``, the partition ``state`` znodes, ``/admin/delete_topics``):
ZooKeeper delivers every change in order, to every broker, including one that was
disconnected (it reads the current state when its watch fires or it reconnects), and nothing
a deposed controller tries can get there (its writes fail the epoch check). What a broker
tells the controller (it removed a deleted topic's replicas; it wants to shut down) it also
writes to ZooKeeper.
"""
