"""The ``storage-core`` command.

storage-core dump-log PATH|s3://BUCKET/KEY... [--print-data] [--verify-index] [--json]
    [--broker-config server.properties] [--rsm-config KEY=VALUE ...]  (remote objects)
storage-core describe-log-dir DIR [--json]
storage-core demo [--dir DIR] [--records N]
storage-core broker --config server.properties [--override key=value ...]
storage-core topics [--bootstrap-server HOST:PORT] create|list|describe|delete|alter-config ...
storage-core produce [--bootstrap-server HOST:PORT] --topic T [--count N --record-size B]
storage-core consume [--bootstrap-server HOST:PORT] --topic T --offset earliest|latest|N
storage-core reassign-partitions [--bootstrap-server HOST:PORT] --execute|--verify|--cancel
    --reassignment-json-file F [--additional] [--disallow-replication-factor-change]
storage-core reassign-partitions [--bootstrap-server HOST:PORT] --list
storage-core remote-log-metadata dump [--bootstrap-server HOST:PORT] [--partition N]
    [--from-beginning] [--property print.message.offset=true ...]
storage-core tier [--bootstrap-server HOST:PORT] --log-dir DIR [--topic T] [--dry-run]
    [--expire] [--delete-partitions] [--rewrite] [--broker-config server.properties]
    [--remote-storage-manager NAME] [--rsm-config key=value ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from storage_core.errors import StorageError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="storage-core", description="A Kafka-compatible log engine with tiered storage."
    )
    parser.add_argument("--log-level", default="WARNING", help="Python log level (INFO, DEBUG...)")
    commands = parser.add_subparsers(dest="command", required=True)

    dump = commands.add_parser(
        "dump-log", help="print the batches, records, index entries or epochs of segment files"
    )
    dump.add_argument(
        "paths", nargs="+", metavar="PATH", help="a file, or s3://BUCKET/KEY of a remote segment"
    )
    dump.add_argument("--print-data", action="store_true", help="also print every record")
    dump.add_argument(
        "--verify-index", action="store_true", help="check index entries against the .log file"
    )
    dump.add_argument("--json", action="store_true", help="one JSON object per line")
    dump.add_argument(
        "--broker-config",
        type=Path,
        metavar="server.properties",
        help="its rsm.config.* key ring decrypts remote segments' objects",
    )
    dump.add_argument(
        "--rsm-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="rsm.config.* (the key ring: encryption.key.pairs...), over the broker config's",
    )

    describe = commands.add_parser(
        "describe-log-dir", help="partitions, segments, offsets and sizes of a log dir"
    )
    describe.add_argument("log_dir", type=Path, metavar="DIR")
    describe.add_argument("--json", action="store_true", help="print one JSON document")

    demo = commands.add_parser(
        "demo", help="write, crash, recover, retain and dump a log on the embedded default"
    )
    demo.add_argument("--dir", type=Path, default=Path("demo-data"), help="working directory")
    demo.add_argument("--records", type=int, default=30_000, help="records to write")

    broker = commands.add_parser(
        "broker", help="run a Kafka-compatible broker (Kafka's server.properties names)"
    )
    broker.add_argument(
        "--config", type=Path, metavar="server.properties", help="broker properties file"
    )
    broker.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a property, winning over the file (repeatable)",
    )
    _add_client_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    # The format names no caller, thread or process: the logging module is told not to look
    # them up for every record (the optimizations of the logging HOWTO).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        if args.command == "dump-log":
            return _dump_log(args)
        if args.command == "describe-log-dir":
            return _describe_log_dir(args)
        if args.command == "demo":
            from storage_core.demo import run_demo  # noqa: PLC0415 (keeps other commands light)

            return run_demo(args.dir, record_count=args.records)
        if args.command == "broker":
            return _broker(args)
        if args.command in _CLIENT_COMMANDS:
            return _client_command(args)
    except StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return 1


BROKER_SWITCH_INTERVAL_S = 0.001  # seconds a thread holds the interpreter lock at most


def _broker(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415
    import faulthandler  # noqa: PLC0415
    import signal  # noqa: PLC0415

    from storage_core.server.kafka_broker import run_until_signalled  # noqa: PLC0415
    from storage_core.server.kafka_config import KafkaConfig  # noqa: PLC0415
    from storage_core.tools.key_values import parse_key_values  # noqa: PLC0415

    try:
        overrides = parse_key_values(args.override, option="--override")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.config is not None:
        config = KafkaConfig.load(args.config, overrides)
    else:
        config = KafkaConfig.from_props(overrides)
    # `kill -USR2 <pid>` prints every thread's stack to stderr (a broker that seems stuck)
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    # ZooKeeper's connection thread needs the interpreter lock several times per answer: 3,000
    # reads beside two busy threads took 15 s at Python's default switch of 5 ms, 5.5 s at 1 ms
    sys.setswitchinterval(BROKER_SWITCH_INTERVAL_S)
    if logging.getLogger().level > logging.INFO and args.log_level.upper() == "WARNING":
        logging.getLogger("storage_core").setLevel(logging.INFO)
    asyncio.run(run_until_signalled(config))
    return 0


def _dump_log(args: argparse.Namespace) -> int:
    from storage_core.tools import dump_remote  # noqa: PLC0415
    from storage_core.tools.dump_log import dump_path, format_row  # noqa: PLC0415

    status = 0
    ring_of_settings = functools.cache(
        lambda: dump_remote.key_ring_from_settings(args.broker_config, args.rsm_config)
    )  # built for the first remote object only
    for name in args.paths:
        path = Path(name)
        if name.startswith(dump_remote.S3_SCHEME):
            rows = dump_remote.dump_s3_object(
                name,
                broker_config_path=args.broker_config,
                rsm_config=args.rsm_config,
                print_data=args.print_data,
                verify_index=args.verify_index,
            )
        elif not path.is_file():
            print(f"error: {path} is not a file", file=sys.stderr)
            status = 2
            continue
        elif (key := dump_remote.remote_object_of(path)) is None:
            rows = dump_path(path, print_data=args.print_data, verify_index=args.verify_index)
        else:
            rows = dump_remote.dump_remote_path(
                path,
                key,
                key_ring=ring_of_settings(),
                print_data=args.print_data,
                verify_index=args.verify_index,
            )
        for row in rows:
            if row["type"] in ("error", "mismatch"):
                status = 3
            print(json.dumps(row) if args.json else format_row(row))
    return status


def _describe_log_dir(args: argparse.Namespace) -> int:
    from storage_core.tools.describe_log_dir import describe_log_dir  # noqa: PLC0415

    summary = describe_log_dir(args.log_dir)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"Log dir {summary['log_dir']} (clean shutdown marker: {summary['clean_shutdown']})")
    for partition in summary["partitions"]:
        print(
            f"  {partition['partition']}: topic_id={partition['topic_id']}"
            f" log_start_offset={partition['log_start_offset']}"
            f" log_end_offset={partition['log_end_offset']}"
            f" high_watermark={partition['high_watermark']}"
            f" size_bytes={partition['size_bytes']} segments={len(partition['segments'])}"
            f" epochs={partition['leader_epochs']}"
        )
        for segment in partition["segments"]:
            print(
                f"    segment {segment['base_offset']:>20}: offsets"
                f" {segment['first_offset']}..{segment['last_offset']}"
                f" batches={segment['batches']} size_bytes={segment['size_bytes']}"
            )
        for name in partition["quarantined_files"]:
            print(f"    quarantined: {name}")
        for problem in partition["problems"]:
            print(f"    problem: {problem}")
    return 0


# ---------------------------------------------------------------------- client commands
_CLIENT_COMMANDS = (
    "topics",
    "produce",
    "consume",
    "remote-log-metadata",
    "tier",
    "reassign-partitions",
    "user-scram",
    "acls",
)
_DEFAULT_BOOTSTRAP_SERVER = "127.0.0.1:9092"


def _add_client_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        default=_DEFAULT_BOOTSTRAP_SERVER,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma separated (default {_DEFAULT_BOOTSTRAP_SERVER})",
    )
    common.add_argument(
        "--command-config",
        type=Path,
        metavar="client.properties",
        help="the client's security settings with Kafka's names (security.protocol, sasl.*,"
        " ssl.*); a file holding a password must be readable by its owner only",
    )

    topics = commands.add_parser(
        "topics", parents=[common], help="create, list, describe, delete topics; alter configs"
    )
    topics.add_argument("action", choices=("create", "list", "describe", "delete", "alter-config"))
    topics.add_argument("--topic", help="topic name (describe: all topics when omitted)")
    topics.add_argument("--partitions", type=int, default=-1, help="default: the broker's")
    topics.add_argument("--replication-factor", type=int, default=-1, help="default: the broker's")
    topics.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="create: topic config"
    )
    topics.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="alter-config: set"
    )
    topics.add_argument(
        "--delete", action="append", default=[], metavar="KEY", help="alter-config: remove"
    )
    topics.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="describe: only partitions whose ISR is smaller than their replicas",
    )
    topics.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="describe: only partitions without a live leader",
    )

    produce = commands.add_parser(
        "produce", parents=[common], help="produce lines from stdin or generated records"
    )
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, default=0)
    produce.add_argument("--acks", default="all", help="all, -1, 1 or 0 (default all)")
    produce.add_argument("--compression", default="none", help="none, gzip, snappy, lz4, zstd")
    produce.add_argument("--key-separator", help="split each line into KEY<sep>VALUE")
    produce.add_argument("--count", type=int, help="generate this many records instead of stdin")
    produce.add_argument("--record-size", type=int, default=100, help="bytes per generated value")
    produce.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress line on stderr (default: when stderr is a terminal)",
    )

    consume = commands.add_parser("consume", parents=[common], help="print records of a partition")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int, default=0)
    consume.add_argument("--offset", default="latest", help="earliest, latest or an offset")
    consume.add_argument("--count", type=int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=int, help="stop when no record came for this long")
    output = consume.add_mutually_exclusive_group()
    output.add_argument("--print-offsets", action="store_true", help="prefix OFFSET<TAB>")
    output.add_argument("--json", action="store_true", help="one JSON object per record")

    user_scram = commands.add_parser(
        "user-scram",
        parents=[common],
        help="add, delete, describe users' SCRAM credentials (kafka-configs.sh --entity-type"
        " users)",
        allow_abbrev=False,  # "--password x" must not pass for --password-file
    )
    scram_action = user_scram.add_mutually_exclusive_group(required=True)
    scram_action.add_argument("--add", metavar="USER", help="add or replace USER's credential")
    scram_action.add_argument("--delete", metavar="USER", help="delete USER's credential")
    scram_action.add_argument(
        "--describe", nargs="*", metavar="USER", help="describe USERs (none: every user)"
    )
    user_scram.add_argument("--mechanism", help="SCRAM-SHA-256 or SCRAM-SHA-512")
    user_scram.add_argument(
        "--iterations", type=int, default=4096, help="--add: 4096 to 16384 (default 4096)"
    )
    user_scram.add_argument(
        "--password-file",
        type=Path,
        help="--add: read the password from this file's first line (default: a prompt)",
    )

    acls = commands.add_parser(
        "acls",
        parents=[common],
        help="add, remove, list ACLs (kafka-acls.sh)",
        allow_abbrev=False,
    )
    acls_action = acls.add_mutually_exclusive_group(required=True)
    acls_action.add_argument("--add", action="store_true", help="add the ACLs described")
    acls_action.add_argument("--remove", action="store_true", help="remove the ACLs described")
    acls_action.add_argument("--list", action="store_true", help="list ACLs")
    for flag, text in (
        ("--allow-principal", "principal to allow, e.g. User:alice (repeatable)"),
        ("--deny-principal", "principal to deny (repeatable)"),
        ("--allow-host", "host the allow ACLs apply from (default *)"),
        ("--deny-host", "host the deny ACLs apply from (default *)"),
        (
            "--operation",
            "Read, Write, Create, Delete, Alter, Describe, ClusterAction,"
            " DescribeConfigs, AlterConfigs, IdempotentWrite, All (default All)",
        ),
        ("--topic", "topic (repeatable; * for every topic)"),
        ("--group", "consumer group (repeatable; * for every group)"),
        ("--transactional-id", "transactional id (repeatable)"),
        ("--principal", "--list: only this principal's ACLs (repeatable)"),
    ):
        acls.add_argument(flag, action="append", default=[], help=text)
    acls.add_argument("--cluster", action="store_true", help="the cluster resource")
    acls.add_argument(
        "--resource-pattern-type",
        help="LITERAL (default for --add/--remove), PREFIXED, or ANY, MATCH (--list, --remove)",
    )
    acls.add_argument("--producer", action="store_true", help="--add: a producer's ACLs")
    acls.add_argument("--consumer", action="store_true", help="--add: a consumer's ACLs")
    acls.add_argument(
        "--idempotent", action="store_true", help="--producer: IDEMPOTENT_WRITE on the cluster"
    )
    acls.add_argument("--force", action="store_true", help="--remove: do not ask to confirm")

    reassign = commands.add_parser(
        "reassign-partitions",
        parents=[common],
        help="move partitions between brokers (kafka-reassign-partitions.sh)",
    )
    action = reassign.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("execute", "start the reassignments of the JSON file"),
        ("verify", "say whether the file's reassignments are complete"),
        ("list", "list the reassignments in progress"),
        ("cancel", "cancel the file's reassignments still in progress"),
    ):
        action.add_argument(
            f"--{name}", dest="reassign_action", action="store_const", const=name, help=text
        )
    reassign.add_argument(
        "--reassignment-json-file",
        type=Path,
        metavar="F",
        help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}',
    )
    reassign.add_argument(
        "--additional",
        action="store_true",
        help="execute even though other reassignments are in progress",
    )
    reassign.add_argument(
        "--disallow-replication-factor-change",
        action="store_true",
        help="refuse reassignments that change a partition's replica count",
    )

    rlm = commands.add_parser(
        "remote-log-metadata", parents=[common], help="print __remote_log_metadata events"
    )
    rlm.add_argument("action", choices=("dump",))
    rlm.add_argument("--partition", type=int, action="append", help="metadata partition(s)")
    rlm.add_argument("--from-beginning", action="store_true", help="default: only new events")
    rlm.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="print.partition, print.message.offset, print.version,"
        " print.all.event.value.fields (true/false), separator",
    )
    rlm.add_argument("--max-messages", type=int, help="stop after this many records")
    rlm.add_argument("--timeout-ms", type=int, help="stop when no record came for this long")
    _add_tier_parser(commands, common)


def _add_tier_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    tier = commands.add_parser(
        "tier",
        parents=[common],
        help="copy eligible segments to the remote tier now; or expire, or delete partitions",
    )
    tier.add_argument("--log-dir", type=Path, metavar="DIR", help="default: the broker config's")
    tier.add_argument("--topic", help="only this topic")
    tier.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    tier.add_argument("--expire", action="store_true", help="run remote retention instead")
    tier.add_argument(
        "--delete-partitions",
        action="store_true",
        help="delete the remote data of partitions marked deleted instead",
    )
    tier.add_argument(
        "--rewrite",
        action="store_true",
        help="re-copy remote segments not in the configured rsm.config.* format (key rotation)",
    )
    tier.add_argument(
        "--broker-config", type=Path, metavar="server.properties", help="RSM and broker defaults"
    )
    tier.add_argument(
        "--broker-id",
        type=int,
        help="whose log dir it is (default: the broker config's, else the only broker)",
    )
    tier.add_argument(
        "--remote-storage-manager",
        metavar="NAME",
        help="LocalTieredStorage, S3RemoteStorageManager or a dotted path",
    )
    tier.add_argument(
        "--rsm-config", action="append", default=[], metavar="KEY=VALUE", help="rsm.config.*"
    )
    tier.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    tier.add_argument(
        "--run-timeout-s",
        type=float,
        default=600.0,
        metavar="S",
        help="bound on the whole run: past it, exit 1 naming the store (default 600)",
    )


def _client_command(args: argparse.Namespace) -> int:
    """Run a client subcommand; its errors are one line on stderr and exit code 1."""
    from storage_core.client.client_properties import connection_config_from_file  # noqa: PLC0415

    try:
        if args.command == "topics":
            from storage_core.tools.topics import run_topics  # noqa: PLC0415

            return run_topics(
                args.action,
                bootstrap_server=args.bootstrap_server,
                connection_config=connection_config_from_file(args.command_config),
                topic=args.topic,
                partitions=args.partitions,
                replication_factor=args.replication_factor,
                configs=args.config,
                set_configs=args.set,
                delete_configs=args.delete,
                out=sys.stdout,
                err=sys.stderr,
                under_replicated=args.under_replicated_partitions,
                unavailable=args.unavailable_partitions,
            )
        if args.command == "produce":
            from storage_core.tools.produce import run_produce  # noqa: PLC0415

            return run_produce(
                bootstrap_server=args.bootstrap_server,
                connection_config=connection_config_from_file(args.command_config),
                topic=args.topic,
                partition=args.partition,
                acks=args.acks,
                compression=args.compression,
                key_separator=args.key_separator,
                count=args.count,
                record_size=args.record_size,
                progress=args.progress,
                stdin=sys.stdin.buffer,
                err=sys.stderr,
            )
        if args.command == "tier":
            from storage_core.tools.tier import TierRunTimeoutError, run_tier  # noqa: PLC0415

            try:
                return run_tier(
                    bootstrap_server=args.bootstrap_server,
                    connection_config=connection_config_from_file(args.command_config),
                    log_dir=args.log_dir,
                    topic=args.topic,
                    dry_run=args.dry_run,
                    expire=args.expire,
                    delete_partitions_marked=args.delete_partitions,
                    rewrite=args.rewrite,
                    broker_config_path=args.broker_config,
                    broker_id=args.broker_id,
                    remote_storage_manager=args.remote_storage_manager,
                    rsm_config=args.rsm_config,
                    progress=args.progress,
                    out=sys.stdout,
                    err=sys.stderr,
                    run_timeout_s=args.run_timeout_s,
                )
            except TierRunTimeoutError as exc:
                # Its worker may be stuck in a store call: leave now rather than wait for it
                # at interpreter exit (it leaves what a crash leaves; see storage_core.tools.tier).
                print(f"error: {exc}", file=sys.stderr, flush=True)
                sys.stdout.flush()
                os._exit(1)
        if args.command == "user-scram":
            from storage_core.tools.user_scram import run_user_scram  # noqa: PLC0415

            return run_user_scram(
                bootstrap_server=args.bootstrap_server,
                command_config=args.command_config,
                add=args.add,
                delete=args.delete,
                describe=args.describe,
                mechanism=args.mechanism,
                iterations=args.iterations,
                password_file=args.password_file,
                out=sys.stdout,
            )
        if args.command == "acls":
            from storage_core.tools.acls import AclOptions, main_confirm, run_acls  # noqa: PLC0415

            return run_acls(
                bootstrap_server=args.bootstrap_server,
                command_config=args.command_config,
                options=AclOptions(
                    add=args.add,
                    remove=args.remove,
                    list=args.list,
                    allow_principals=args.allow_principal,
                    deny_principals=args.deny_principal,
                    allow_hosts=args.allow_host,
                    deny_hosts=args.deny_host,
                    operations=args.operation,
                    topics=args.topic,
                    groups=args.group,
                    cluster=args.cluster,
                    transactional_ids=args.transactional_id,
                    resource_pattern_type=args.resource_pattern_type,
                    producer=args.producer,
                    consumer=args.consumer,
                    idempotent=args.idempotent,
                    principal=args.principal,
                    force=args.force,
                ),
                out=sys.stdout,
                confirm=main_confirm,
            )
        if args.command == "reassign-partitions":
            from storage_core.tools.reassign_partitions import (  # noqa: PLC0415
                run_reassign_partitions,
            )

            path = args.reassignment_json_file
            try:
                text = path.read_text() if path is not None else None
            except OSError as exc:
                raise ValueError(f"cannot read --reassignment-json-file: {exc}") from exc
            return run_reassign_partitions(
                args.reassign_action,
                bootstrap_server=args.bootstrap_server,
                connection_config=connection_config_from_file(args.command_config),
                reassignment_json=text,
                out=sys.stdout,
                additional=args.additional,
                allow_replication_factor_change=not args.disallow_replication_factor_change,
            )
        if args.command == "remote-log-metadata":
            from storage_core.tools import remote_log_metadata_dump as rlm  # noqa: PLC0415
            from storage_core.tools.key_values import parse_key_values  # noqa: PLC0415

            return rlm.run_remote_log_metadata_dump(
                bootstrap_server=args.bootstrap_server,
                connection_config=connection_config_from_file(args.command_config),
                partitions=args.partition,
                from_beginning=args.from_beginning,
                properties=parse_key_values(args.property, option="--property"),
                max_messages=args.max_messages,
                timeout_ms=args.timeout_ms,
                out=sys.stdout,
                err=sys.stderr,
            )
        from storage_core.tools.consume import run_consume  # noqa: PLC0415

        return run_consume(
            bootstrap_server=args.bootstrap_server,
            connection_config=connection_config_from_file(args.command_config),
            topic=args.topic,
            partition=args.partition,
            offset=args.offset,
            count=args.count,
            timeout_ms=args.timeout_ms,
            print_offsets=args.print_offsets,
            as_json=args.json,
            out=sys.stdout,
            err=sys.stderr,
        )
    except (StorageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    # kio's phantom types import hypothesis when it is installed (a development install) to
    # register test strategies; that pulls in pytest and trio, half a second of every broker
    # start for nothing a broker or a tool uses. Only here: main() also runs in test processes.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type] # None: import fails
    raise SystemExit(main())
