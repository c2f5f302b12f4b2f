"""The protocol layer shared by the client and the broker (Kafka's ``org.apache.kafka.common``
protocol, message and request classes).

- ``messages``: the request and response message classes of any API version (Kafka's generated
  ``common.message`` classes, here ``kio``'s) and ``build``, which makes a message of any version
  from the superset of its fields' values; the broker answers and the client asks through it.
- ``config_resource``: Kafka's enums of the config APIs, ``ConfigResource.Type``,
  ``DescribeConfigsResponse.ConfigSource`` and ``ConfigType``, ``AlterConfigOp.OpType``.

Nothing here imports the client or the broker: both sit on it.
"""
