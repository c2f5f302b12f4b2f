"""Disaster recovery from the bucket: what the remote tier holds besides the segments (topic
manifests, consumer offset backups), reading a bucket back, and planning a restore."""
