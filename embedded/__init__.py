"""The embedded default: the whole system on one machine.

A broker process on loopback with remote storage in a local directory, Spark in local mode
and Airflow on SQLite, all under one working directory:

    <dir>/broker-0/server.properties    the broker's configuration
    <dir>/broker-0/kafka-logs/          its log dir (what the jobs read, read-only)
    <dir>/broker-0/broker.log           its output
    <dir>/remote-tier/                  the remote tier (LocalTieredStorage)
    <dir>/airflow/                      AIRFLOW_HOME: SQLite database, task logs
    <dir>/reports/                      run summaries, Data Docs, status snapshots
    <dir>/logs/                         output of every command the demo ran

``python -m embedded.demo`` runs the pipeline end to end; ``python -m embedded.airflow_ui``
serves the Airflow UI over the same cluster.
"""
