# The two entry points of the project. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo airflow-ui test browser lint bench chaos-controller clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	UV_COMPILE_BYTECODE=1 $(BIN)/uv pip install --python $(BIN)/python --quiet -e '.[dev,pipeline]'
	@# pyspark comes as a source archive, and each install left another ~1 GiB copy of it
	@# in uv's cache until the disk filled: keep only what the cache can still reach.
	$(BIN)/uv cache prune --quiet
	touch $(STAMP)

## The main job on the embedded default: a broker, the tiering and retention DAGs through
## Airflow (Spark jobs, data-quality checks), tiered offsets consumed back, the reports.
demo: $(STAMP)
	$(BIN)/python -m embedded.demo --dir $${DEMO_DIR:-demo-data}

## The Airflow UI (airflow standalone on 127.0.0.1) over the same embedded cluster.
airflow-ui: $(STAMP)
	$(BIN)/python -m embedded.airflow_ui --dir $${DEMO_DIR:-demo-data} --port $${AIRFLOW_PORT:-8080}

## Headless Chromium for the UI's browser test, where root can apt-get it (as on CI);
## elsewhere that test is skipped with the reason.
browser:
	@if command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver >/dev/null) \
		|| echo "chromium could not be installed: the browser test will be skipped"; \
	else echo "no chromium and no root apt-get: the browser test will be skipped"; fi

## Lint and type-check, then run the whole test suite: most tests wait on brokers, ZooKeeper,
## Spark and Airflow, so two files run at a time (each file's tests on one worker, with its
## module fixtures).
test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy storage_core jobs embedded
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n $${TEST_WORKERS:-2} --dist loadfile --durations=25

## Controller failovers under topic churn: the controller's broker SIGKILLed 10 times (KILLS=n)
## while topics are created and deleted, then ZooKeeper, every broker and the log dirs compared
## (about 2 minutes; `make test` runs the same test with 3 kills).
chaos-controller: $(STAMP)
	CHAOS_CONTROLLER_KILLS=$${KILLS:-10} $(BIN)/python -m pytest -q -s -p no:cacheprovider \
		tests/integration/test_controller_chaos.py

## Controlled shutdown at scale: three brokers, RF 3, PARTITIONS partitions (default 3,000), a
## broker leading a third of them SIGTERMed; every leadership moves before it exits and its
## ZooKeeper session keeps its margin (several minutes; `make test` runs it with 450).
.PHONY: scale-shutdown
scale-shutdown: $(STAMP)
	SCALE_SHUTDOWN_PARTITIONS=$${PARTITIONS:-3000} $(BIN)/python -m pytest -q -s -p no:cacheprovider \
		tests/integration/test_controlled_shutdown_at_scale.py

## Log, broker, remote-read, copy-job, cluster-metadata, replication, security and read_committed
## benchmarks, each against a baseline measured in the same run.
bench: $(STAMP)
	$(BIN)/python benchmarks/log_append.py
	$(BIN)/python benchmarks/broker_throughput.py
	$(BIN)/python benchmarks/remote_read.py
	$(BIN)/python benchmarks/remote_read_parallel.py
	$(BIN)/python benchmarks/reader_round_trip.py
	$(BIN)/python benchmarks/copy_throughput.py
	$(BIN)/python benchmarks/cluster_metadata.py
	$(BIN)/python benchmarks/replication.py
	$(BIN)/python benchmarks/security_throughput.py
	$(BIN)/python benchmarks/read_committed.py
	$(BIN)/python benchmarks/transactional_produce.py
	$(BIN)/python benchmarks/restore.py

## Production scale (issue 30): 300 / 1,000 / 3,000 partitions on three brokers and 10^3 / 10^4 /
## 10^5 remote segments, each figure per partition or segment with its ratio between sizes, and
## the issue's aims met or not (about 25 minutes; `make test` runs the short variant).
## SCALE_ARGS passes options (e.g. SCALE_ARGS='--partitions 300,1000 --only create,restart').
.PHONY: bench-scale
bench-scale: $(STAMP)
	$(BIN)/python benchmarks/scale.py --json $${SCALE_JSON:-bench-data/scale.json} $${SCALE_ARGS}

## Soak: an hour of tiering, retention and topic drops on 300 partitions of one broker with a
## producer running; the broker's RSS, descriptors and __remote_log_metadata (bytes, records)
## sampled every minute, exit 1 unless flat after the first cycles (MINUTES=n, PARTITIONS=n;
## `make test` runs the same code for 30 cycles, about 3 minutes, on 24 partitions).
.PHONY: soak
soak: $(STAMP)
	$(BIN)/python -m tests.metadata_soak --minutes $${MINUTES:-60} --partitions $${PARTITIONS:-300}

## The replication proof at length (tests/chaos): ROUNDS rounds (default 20) of a seeded nemesis
## (SEED, default 1) on three brokers while idempotent acks=all producers write; checks after each
## round, prints counts and failover times (about 25 s a round; `make test` runs 4 rounds).
.PHONY: jepsen
jepsen: $(STAMP)
	$(BIN)/python -m tests.chaos.jepsen --rounds $${ROUNDS:-20} --seed $${SEED:-1} \
		$${JEPSEN_DIR:+--dir $$JEPSEN_DIR}

## The exactly-once proof (tests/chaos/eos.py): a transactional consume-transform-produce loop
## process (confluent-kafka, send_offsets_to_transaction) while a seeded nemesis SIGKILLs the
## transaction coordinator, the group coordinator, input and output leaders and the loop
## (ROUNDS, default 10; SEED, default 1; EOS_DIR keeps the run); `make test` runs 5 rounds.
.PHONY: eos
eos: $(STAMP)
	$(BIN)/python -m tests.chaos.eos --rounds $${ROUNDS:-10} --seed $${SEED:-1} \
		$${EOS_DIR:+--dir $$EOS_DIR}

## librdkafka's own security tests (0097, 0133, 0135, 0115, 0119 and produce/consume tests on
## SASL_SSL) against a broker with SASL_SSL, SSL and ACLs; Debian's librdkafka sources are
## fetched and built into test-artifacts/librdkafka/ on the first run (TESTS=0097,0135 for some).
.PHONY: librdkafka-security
librdkafka-security: $(STAMP)
	$(BIN)/python -m tests.librdkafka.security_suite $${TESTS:+--tests $$TESTS}

## librdkafka's own transaction tests (0103, 0105 on its mock cluster, 0129, 0055's and 0061's
## transactional cases) against ZooKeeper and three plain brokers; the same build as above
## (TESTS=0103,0129 for some).
.PHONY: librdkafka-transactions
librdkafka-transactions: $(STAMP)
	$(BIN)/python -m tests.librdkafka.transactions_suite $${TESTS:+--tests $$TESTS}

clean:
	rm -rf $(VENV) demo-data test-artifacts .pytest_cache .mypy_cache .ruff_cache
