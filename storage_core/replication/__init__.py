"""Partitions and their roles: leader appends, high watermark, fetches (``ReplicaManager``)."""
