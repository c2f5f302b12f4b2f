"""The exactly-once proof, short variant: a transactional consume-transform-produce loop
process (confluent-kafka, read_committed, ``send_offsets_to_transaction``) from an input to an
output topic on three brokers (RF 3, min ISR 2, ``__transaction_state`` and
``__consumer_offsets`` alike) while a seeded nemesis SIGKILLs, one round each, the transaction
coordinator's broker, the group coordinator's, an input leader, an output leader and the loop
itself, and starts them again. At the end a read_committed consumer reads every input record
in the output exactly once, in order per key, and nothing of the aborted attempts, which a
read_uncommitted read shows. The long run is ``make eos``.

The checks are checked by ``python -m tests.chaos.eos --offsets-apart`` (the loop commits its
offsets after each transaction rather than in it: a kill of the loop in between has its next
run write the batch again, and the run must report the duplicates; about 80 s, kept out of
``make test``) and, kind by kind, by ``tests/unit/test_chaos_eos_check.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.chaos.eos import Kind, run

cluster_support.require_java()
SEED = 20261129
ROUNDS = 5  # one of each kind of kill (see eos.plan)


@pytest.mark.timeout(420)
def test_every_input_record_is_output_exactly_once_through_the_kills(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    report = run(zookeeper, tmp_path, rounds=ROUNDS, seed=SEED)
    print(report.summary())
    assert report.ok, report.summary()
    assert report.check is not None and report.check.expected == report.check.read_committed
    assert set(report.kills) == {kind.value for kind in Kind}
    assert report.loop_runs >= 2  # the loop's own kill started a new run, fencing the old
