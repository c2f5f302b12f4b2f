"""Coordinators hosted by the broker (Kafka's ``coordinator`` package): consumer groups."""
