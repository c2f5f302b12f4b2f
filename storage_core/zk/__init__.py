"""Kafka's ``kafka.zk``: what the brokers and the controller keep in ZooKeeper, and how.

    zk_data            ZkData: the znode paths and what each znode holds (broker and
                       controller registrations, topic assignments, partition states, ...)
    kafka_zk_client    KafkaZkClient: the reads and writes the brokers and the controller make,
                       conditional where Kafka's are (controller epoch fencing, znode versions)
    local_znode_tree   the single-node store of a broker without ``zookeeper.connect``: a znode
                       tree in its log dir that KafkaZkClient uses through kazoo's API

Nothing here imports the controller, replication or the broker: they sit on this package.
"""
