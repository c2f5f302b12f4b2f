"""The transaction coordinator (Kafka's ``kafka.coordinator.transaction``). Its decisions are
pure (no sockets, no broker, no threads, time passed in); the coordinator, its state manager
and the marker channel do the I/O around them.

* ``transaction_coordinator`` (``TransactionCoordinator``): the requests, the partitions'
  load and unload as leadership moves, the timed-out aborts and the ids' expiration;
  ``transaction_state_manager`` the cache of ids per ``__transaction_state`` partition and its
  writes; ``transaction_completion`` a decided transaction's markers and its final record;
  ``transaction_listing`` what DescribeTransactions / ListTransactions show;

* ``transaction_state``: the eight states and their valid previous states
  (``TransactionState``);
* ``transaction_metadata``: one transactional id's state and its prepared transitions
  (``TransactionMetadata``, ``TxnTransitMetadata``);
* ``transaction_log``: the records of ``__transaction_state`` (``TransactionLog``:
  ``TransactionLogKey`` / ``TransactionLogValue``) and the partition of a transactional id;
  ``transaction_log_codec`` the strings, arrays, varints and tagged fields they are made of;
* ``transaction_coordinator_logic``: what ``TransactionCoordinator`` decides for
  InitProducerId, AddPartitionsToTxn (and its v4 verification), AddOffsetsToTxn, EndTxn and
  the abort of a timed-out transaction; ``transaction_results`` the plain results it
  returns (errors, transits to append, markers to send) and the request-version rules;
* ``transaction_state_manager_logic``: the pure part of ``TransactionStateManager``: its
  settings, what an append answers, timed-out transactions, expired transactional ids, the
  markers a partition's load leaves to send;
* ``transaction_marker_channel`` (``TransactionMarkerChannelManager``): the markers sent to
  the partition leaders in WriteTxnMarkers requests, retried until written;
  ``transaction_marker_entries`` its pure parts, ``transaction_marker_sender`` one sender
  thread per destination broker.
"""
