# The project image of the scale-out deployment (docker-compose.yml): the brokers, the Spark
# worker and every Airflow service run it, so that the Spark driver (a job started by the
# Airflow scheduler) and its executors (on the Spark worker) run the same Python, the same
# packages and see the brokers' log dirs at the same paths.
#
#   docker compose build            # or: docker build -t storage-core:0.1.0 .
#
# Based on the official Airflow image (Python, the airflow user uid 50000 / gid 0, dumb-init,
# the Airflow entrypoint); the brokers and the Spark worker replace the entrypoint.

ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}

ARG AIRFLOW_VERSION
# The Spark master runs apache/spark:<SPARK_VERSION>; the driver and the worker run the Spark
# bundled in pyspark, pinned to the same version (docker-compose.yml passes one value to both).
ARG SPARK_VERSION=4.1.1

USER root

# Java for the Spark driver and worker. Spark 4 wants a full JDK, not a trimmed runtime.
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jdk-headless \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/default-java

# Mount points of the named volumes of docker-compose.yml. A new named volume takes the owner
# of the directory it is mounted on, so these belong to the airflow user: the brokers write
# their log dirs, the scheduler its job locks and reports, the worker its scratch space.
RUN mkdir -p \
        /var/lib/storage-core/broker-1 \
        /var/lib/storage-core/broker-2 \
        /var/lib/storage-core/broker-3 \
        /var/lib/storage-core/locks \
        /var/lib/storage-core/reports \
        /var/lib/storage-core/spark-work \
        /opt/storage-core \
    && chown -R airflow:0 /var/lib/storage-core /opt/storage-core \
    && chmod -R g+rwX /var/lib/storage-core /opt/storage-core

USER airflow

# The project: installed for the brokers and the Spark executors, and kept as a source tree at
# /opt/storage-core, where the Airflow operator runs `python -m jobs.<name>`
# (TIERED_STORAGE_PROJECT_DIR) and the quality job finds the `expectations` suites.
COPY --chown=airflow:0 pyproject.toml README.md /opt/storage-core/
COPY --chown=airflow:0 storage_core /opt/storage-core/storage_core
COPY --chown=airflow:0 jobs /opt/storage-core/jobs
COPY --chown=airflow:0 embedded /opt/storage-core/embedded
COPY --chown=airflow:0 expectations /opt/storage-core/expectations
# apache-airflow stays at the image's version (the Airflow image's advice for added packages).
RUN pip install --no-cache-dir \
        "apache-airflow==${AIRFLOW_VERSION}" \
        "/opt/storage-core[pipeline]" \
        "pyspark[connect]==${SPARK_VERSION}"

# The DAGs and the plugin, in the image's default dags and plugins folders.
COPY --chown=airflow:0 dags /opt/airflow/dags
COPY --chown=airflow:0 plugins /opt/airflow/plugins
