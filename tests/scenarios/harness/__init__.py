"""The scenario harness: what the stages of the stories (``tests/scenarios``) and the chaos
cluster (``tests/chaos/cluster.py``) share, so that a stage file keeps only what is specific
to its stories.

- ``waiting``: the wait-until loops, and ``settle``, which takes a picture until it is the
  expected one (the loop behind every stage's ``expect``);
- ``brokers``: ``BrokerSet``, broker processes of one cluster under a fresh ZooKeeper chroot
  (start, stop, SIGKILL, SIGSTOP/SIGCONT, a killed broker started again) and what the
  controller wrote to ZooKeeper (registrations, partition states, assignments);
- ``partitions``: what a broker answers about a partition (its own Metadata, ListOffsets);
- ``clients``: the client calls of the stories (IncrementalAlterConfigs, DeleteRecords, a
  partition read to its end, ``storage-core tier`` in-process);
- ``replica_picture``: the replication stories' picture of every replica's log (high
  watermark, leader epoch checkpoint, the epoch of every offset) and of the remote segments;
- ``segment_picture``: the tiered stories' picture of segment files, remote segments and
  the ListOffsets answers.
"""
