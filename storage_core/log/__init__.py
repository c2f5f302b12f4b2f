"""The local log of a partition, in Kafka's storage classes (``storage.internals.log``).

Bottom up: ``abstract_index``, ``offset_index``, ``time_index`` (the ``.index`` and
``.timeindex`` files) -> ``log_segment`` (``LogSegment``) -> ``log_segments``
(``LogSegments``, the ordered segment list) -> ``local_log`` (``LocalLog``: the segments, the
LEO and the recovery point) -> ``log`` (``Log``, Kafka's ``UnifiedLog``: log start offset,
high watermark, epochs, producers, truncation; its appends and rolls in ``log_appender``
(``LogAppender``), its log start offset and local retention in ``log_retention``
(``LogRetention``)) -> ``log_manager`` (``LogManager``).

Beside them: ``log_loader`` (``LogLoader``: recovery at open), ``log_validator``
(``LogValidator``: append validation and offset assignment), ``retention`` (local retention
decisions), ``leader_epoch_cache`` (``LeaderEpochFileCache``), ``checkpoints``,
``partition_metadata`` and ``meta_properties`` (checkpoint files), ``log_config``
(``LogConfig``); and the idempotent-producer state: ``producer_state_entry``
(``ProducerStateEntry``, ``BatchMetadata``, ``CompletedTxn``), ``producer_append_info``
(``ProducerAppendInfo``, ``AppendOrigin``), ``producer_snapshot`` (the ``.snapshot`` file
format, ``SnapshotFile``), ``producer_state`` (``ProducerStateManager``) and
``log_producer_state`` (``UnifiedLog``'s producer-state validation and rebuild).
"""
