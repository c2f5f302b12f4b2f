"""Cluster metadata: topics, topic ids, partition assignments and leader epochs."""
