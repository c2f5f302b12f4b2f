"""What ``jobs.cluster_status`` says of each topic's manifest when the bucket cannot answer
(a real ``LocalTieredStorage`` directory; the happy path runs on a broker in
``tests/integration/airflow/test_status_page_recovery_browser.py``)."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from jobs import cluster_status
from jobs.common import parse_job_args
from storage_core.client.metadata import TopicMetadata
from storage_core.common import Uuid
from storage_core.tiered.remote_object_keys import topic_manifest_key


def topic(name: str) -> TopicMetadata:
    return TopicMetadata(
        name=name, topic_id=Uuid.random(), is_internal=False, partitions=(), error=ErrorCode.none
    )


def test_an_unreadable_manifest_and_a_failing_store_are_said_per_topic(tmp_path: Path) -> None:
    store_dir = tmp_path / "bucket"
    args = parse_job_args(
        cluster_status.build_parser(),
        [
            "--remote-storage-manager",
            "LocalTieredStorage",
            "--rsm-config",
            f"local.storage.dir={store_dir}",
        ],
        job=cluster_status.JOB,
        environ={},
    )
    absent, garbled, broken, after = topic("a"), topic("b"), topic("c"), topic("d")
    for t, make in ((garbled, "write"), (broken, "mkdir")):
        assert t.topic_id is not None
        path = store_dir / topic_manifest_key("", t.name, t.topic_id)
        path.parent.mkdir(parents=True)
        if make == "write":
            path.write_text("{not json")
        else:
            path.mkdir()  # reading it fails as a store that cannot read its object

    found = cluster_status.topic_fields(args, [absent, garbled, broken, after])

    assert found["a"]["manifest_written_at_ms"] is None and found["a"]["manifest_error"] is None
    assert found["b"]["manifest_error"].startswith(
        f"TopicManifestError: topic manifest {found['b']['manifest_key']} is unreadable"
    )
    # the store failing stops the reads: that topic and the next say so, the earlier stand
    for name in ("c", "d"):
        assert found[name]["manifest_error"].startswith("not read: RemoteStorageError: cannot read")
    assert found["a"]["manifest_error"] is None

    # a status job given no store says it did not read the manifests, it does not guess
    bare = parse_job_args(cluster_status.build_parser(), [], job=cluster_status.JOB, environ={})
    (fields,) = cluster_status.topic_fields(bare, [absent]).values()
    assert fields["manifest_error"].startswith("not read: the status job was given no remote")
