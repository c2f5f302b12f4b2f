"""The transaction coordinator's core (Kafka's ``kafka.coordinator.transaction``), pure:
no sockets, no broker, no threads, time passed in.

* ``transaction_state``: the eight states and their valid previous states
  (``TransactionState``);
* ``transaction_metadata``: one transactional id's state and its prepared transitions
  (``TransactionMetadata``, ``TxnTransitMetadata``);
* ``transaction_log``: the records of ``__transaction_state`` (``TransactionLog``:
  ``TransactionLogKey`` / ``TransactionLogValue``) and the partition of a transactional id;
* ``transaction_coordinator_logic``: what ``TransactionCoordinator`` decides for
  InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, timed-out transactions,
  expired transactional ids and a partition's load, as plain results.
"""
