"""Many znodes' data in one request: ZooKeeper's ``multiRead`` (opcode 22, ZooKeeper 3.6+; the
servers here and in docker-compose.yml are 3.9), which kazoo 2.11 does not offer.

Wire format (jute, as ``org.apache.zookeeper.MultiOperationRecord`` and ``MultiResponse``):

    request   { MultiHeader(type=4 getData, done=false, err=-1) GetDataRequest(path, watch=false) }*
              MultiHeader(type=-1, done=true, err=-1)
    response  { MultiHeader(type=4, done=false, err=0) GetDataResponse(data, Stat)
              | MultiHeader(type=-1, done=false, err=E) ErrorResponse(err=E) }*
              MultiHeader(type=-1, done=true, err=-1)

Unlike a write transaction, each read succeeds or fails on its own (a missing znode is
NONODE in its slot). Why: reading thousands of partition states one request each costs kazoo's
connection thread several hand-overs of the interpreter lock per answer, which take a whole
switch interval each while the broker's other threads run Python; measured with one busy
thread in the process, 3,000 pipelined reads took 3.7-5.6 s. ``MAX_PATHS_PER_REQUEST`` per
request brings that to a handful of answers.

A session that is not kazoo's (the single-node store), or a server without multiRead (it
answers UNIMPLEMENTED), is read with pipelined single reads instead (``pipelined_requests``).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any, ClassVar

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import (
    MultiHeader,
    ZnodeStat,
    multiheader_struct,
    read_buffer,
    stat_struct,
    write_string,
)

from storage_core.zk.pipelined_requests import send_pipelined

# 500 partition states of ~150 bytes: ~75 KB answers, well under jute.maxbuffer (1 MiB)
MAX_PATHS_PER_REQUEST = 500
GET_DATA_OPCODE = 4
ERROR_OPCODE = -1
_INT = struct.Struct("!i")


class MultiRead:
    """kazoo request of ZooKeeper's multiRead of getData operations (paths with the chroot)."""

    type: ClassVar[int] = 22

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def serialize(self) -> bytearray:
        body = bytearray()
        for path in self.paths:
            body.extend(MultiHeader(GET_DATA_OPCODE, False, -1).serialize())
            body.extend(write_string(path))
            body.append(0)  # no watch
        body.extend(multiheader_struct.pack(-1, True, -1))
        return body

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GET_DATA_OPCODE:
                value, offset = read_buffer(data, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
                offset += stat_struct.size
                results.append((value, stat))
            else:  # ERROR_OPCODE: its code, as ErrorResponse
                (code,) = _INT.unpack_from(data, offset)
                offset += _INT.size
                results.append(EXCEPTIONS[code]())
            header, offset = MultiHeader.deserialize(data, offset)
        return results


def supports_multi_read(session: Any) -> bool:
    """A kazoo client (the single-node store's session answers single reads at once)."""
    return callable(getattr(session, "_call", None))


def multi_read(client: Any, paths: Sequence[str]) -> list[Any]:
    """Each path's ``(data, stat)``, or ``NoNodeError`` where it does not exist, read with
    multiRead requests of ``MAX_PATHS_PER_REQUEST`` paths, pipelined. Raises
    ``UnimplementedError`` from a server without multiRead (before 3.6), and any other
    failure (the connection or session lost)."""
    chroot = client.chroot or ""
    requests = []
    for start in range(0, len(paths), MAX_PATHS_PER_REQUEST):
        request = MultiRead([chroot + p for p in paths[start : start + MAX_PATHS_PER_REQUEST]])
        requests.append(functools.partial(_send, client, request))
    results: list[Any] = []
    for answer in send_pipelined(client, requests):
        for result in answer:
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise result
            results.append(result)
    return results


def single_reads(session: Any, paths: Sequence[str]) -> list[Any]:
    """As ``multi_read``, one getData request per path (pipelined)."""
    return send_pipelined(
        session,
        [functools.partial(session.get_async, path) for path in paths],
        expected_errors=(NoNodeError,),
    )


def _send(client: Any, request: MultiRead) -> Any:
    async_result = client.handler.async_result()
    client._call(request, async_result)
    return async_result
