"""The preferred_leader_election request: its params checked by the plugin (the first task
and the trigger guard, before a run exists), each refusal naming the param."""

from __future__ import annotations

import json
from typing import Any

import pytest


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({}, "topic is required"),
        ({"topic": ""}, "topic is required"),
        ({"topic": "a/b"}, "topic 'a/b' is not a Kafka topic name"),
        ({"topic": "t", "partitions": "0"}, "partitions must be a list"),
        ({"topic": "t", "partitions": [0, -1]}, "partitions must be integers >= 0"),
        ({"topic": "t", "partitions": [True]}, "partitions must be integers >= 0"),
        ({"topic": "t", "partitions": [1, 1]}, "partitions lists a partition twice"),
    ],
)
def test_bad_requests_are_refused_naming_the_param(conf: dict[str, Any], message: str) -> None:
    from tiered_storage_plugin.election import ElectionRequestError, parse_election_request
    from tiered_storage_plugin.trigger_guard import refusal

    with pytest.raises(ElectionRequestError, match=message):
        parse_election_request(conf)
    reason = refusal("preferred_leader_election", json.dumps({"conf": conf}).encode())
    assert reason is not None and message.split(maxsplit=1)[0] in reason


def test_a_good_request_becomes_the_jobs_options() -> None:
    from tiered_storage_plugin.election import parse_election_request

    whole = parse_election_request({"topic": "orders", "partitions": []})
    assert whole.job_arguments() == ["--topic", "orders"]
    some = parse_election_request({"topic": "orders", "partitions": [2, 0]})
    assert some.job_arguments() == ["--topic", "orders", "--partition", "0", "--partition", "2"]
