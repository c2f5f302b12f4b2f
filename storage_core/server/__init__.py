"""The broker (Kafka's ``kafka.server``): the process and what serves the wire protocol.

- ``kafka_broker``: ``KafkaBroker``, the process: builds the managers, starts and stops them.
- ``socket_server`` (+ ``acceptor``, ``kafka_channel``, ``memory_pool``, ``response_pipeline``,
  ``response_parts``): Kafka's ``SocketServer``; it serves every API through the handler
  registry of ``handlers`` (Kafka's ``KafkaApis``, one module per API).
- ``request_context`` and ``broker_services``: what a handler sees, the request and the
  broker's managers (``BrokerServices``), never the broker itself.
- ``admin_manager``: the topic and config admin behind the admin APIs (``ZkAdminManager``).
- ``topic_store``: ``TopicStore``, the broker's door to topic metadata (the ``ZkAdminManager`` /
  ``AdminZkClient`` side): reads from the metadata cache, changes through the controller.
- ``protocol``, ``request_bounds``, ``fetch_response``, ``produce_response``, ``wire_writer``:
  decoding requests and encoding responses.
- ``kafka_config``, ``socket_server_config``, ``dynamic_broker_config``, ``security_config``:
  the broker's configs; ``cluster_membership``: its registration and the controller it runs;
  ``group_coordinator_setup``: ``__consumer_offsets`` and the group coordinator's start.
"""
