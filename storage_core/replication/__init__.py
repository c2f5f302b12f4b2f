"""Partitions and their roles: leader appends, high watermark, fetches (``ReplicaManager``).

What lives where, in Kafka's terms:

- ``replica_manager``: ``ReplicaManager``, which routes produces and fetches to partitions and
  owns the partition map; its ``becomeLeaderOrFollower`` in ``leader_and_isr``, its
  ``appendToLocalLog`` in ``append_to_local_log``, its ``readFromLog`` in ``read_from_log``.
- The purgatories: ``delayed_operation`` (``DelayedOperation``,
  ``DelayedOperationPurgatory``), ``delayed_produce`` (``DelayedProduce``, acks=-1),
  ``delayed_fetch`` (the fetch purgatory and the fetch's request and result types),
  ``delayed_remote_fetch`` (``DelayedRemoteFetch``, tiered offsets),
  ``delayed_delete_records`` (``DelayedDeleteRecords``).
- ``partition``: ``Partition`` (role, leader epoch, ISR, high watermark); ``replica``: a
  follower as its leader sees it (``Replica``); ``alter_partition_manager``: ISR changes.
- The follower side: ``replica_fetcher_manager`` (``ReplicaFetcherManager``),
  ``abstract_fetcher_thread`` (``AbstractFetcherThread``, ``FailedPartitions``),
  ``replica_fetcher_thread`` (``ReplicaFetcherThread``), ``leader_end_point``
  (``RemoteLeaderEndPoint``), ``fetch_state`` (``PartitionFetchState``), ``follower_log``
  and ``offset_truncation`` (appends and truncation of the follower's log),
  ``tier_state_machine`` (``TierStateMachine``, KIP-405), ``replica_fetcher_config``,
  ``replica_metrics``.
- Metadata: ``metadata_cache`` (``MetadataCache``) and ``zk_metadata_listener``.
"""
