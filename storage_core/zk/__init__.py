"""Kafka's ``kafka.zk``: what the brokers and the controller keep in ZooKeeper, and how.

    zk_data            ZkData: the znode paths and what each znode holds (broker and
                       controller registrations, topic assignments, partition states, ...)
    zookeeper_client   ZooKeeperClient (Kafka's ``kafka.zookeeper``): the session, connecting
                       within its timeout, the chroot, session state changes and watches
    controller_zk      ControllerZkClient, KafkaZkClient's controller side: the controller
                       election, the epoch check fencing every controller write, and the
                       writes only the controller makes (partition states, assignments, the
                       reassignment znode, a deleted topic's znodes)
    kafka_zk_client    KafkaZkClient: on top, what every broker reads and writes (cluster id,
                       producer id blocks, its registration, topics and their configs,
                       partition states read, the leader's ISR change, deletion markers)
    local_znode_tree   the single-node store of a broker without ``zookeeper.connect``: a znode
                       tree in its log dir that KafkaZkClient uses through kazoo's API
    config_entity      users' config entities (/config/users/<user>: SCRAM credentials) and
                       their change notifications (/config/changes/config_change_N), with the
                       listener every broker refreshes its credentials from

Nothing here imports the controller, replication or the broker: they sit on this package.
"""
