"""librdkafka's own test suite against the broker (see security_suite.py)."""
