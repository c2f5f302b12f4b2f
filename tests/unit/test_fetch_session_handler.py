"""A follower's fetch session (Kafka's ``FetchSessionHandler``): what each request names,
and how the answer's session id and errors move the next request's metadata, with the cases
of Kafka's ``FetchSessionHandlerTest``."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.replication.fetch_session_handler import FetchMetadata, FetchSessionHandler

FOO0, FOO1, BAR0 = TopicPartition("foo", 0), TopicPartition("foo", 1), TopicPartition("bar", 0)
NONE = int(ErrorCode.none)


def started(session_id: int = 123) -> FetchSessionHandler[tuple[int, int]]:
    handler: FetchSessionHandler[tuple[int, int]] = FetchSessionHandler(node=1)
    first = handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert first.metadata == FetchMetadata(0, 0)
    assert list(first.to_send) == [FOO0, FOO1] and first.to_forget == []
    assert handler.handle_response(NONE, session_id, [FOO0, FOO1])
    return handler


def test_a_leader_that_declines_sessions_gets_full_fetches() -> None:
    handler = started(session_id=0)
    again = handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert again.metadata == FetchMetadata(0, 0) and list(again.to_send) == [FOO0, FOO1]


def test_incremental_requests_name_only_what_changed() -> None:
    handler = started()
    unchanged = handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert unchanged.metadata == FetchMetadata(123, 1)
    assert unchanged.to_send == {} and unchanged.to_forget == []
    assert set(unchanged.session_partitions) == {FOO0, FOO1}
    assert handler.handle_response(NONE, 123, [])  # nothing new: an empty answer is valid
    moved = handler.build({FOO0: (5, 100), FOO1: (10, 110), BAR0: (0, 0)})
    assert moved.metadata == FetchMetadata(123, 2)
    assert moved.to_send == {FOO0: (5, 100), BAR0: (0, 0)}
    assert handler.handle_response(NONE, 123, [FOO0])
    removed = handler.build({FOO0: (5, 100)})
    assert removed.metadata == FetchMetadata(123, 3)
    assert removed.to_send == {} and sorted(removed.to_forget) == [BAR0, FOO1]
    assert list(removed.session_partitions) == [FOO0]


def test_session_not_found_starts_over_and_other_errors_close_and_reopen() -> None:
    handler = started()
    handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert not handler.handle_response(int(ErrorCode.fetch_session_id_not_found), 0, [])
    full = handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert full.metadata == FetchMetadata(0, 0) and len(full.to_send) == 2

    handler = started()
    handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert not handler.handle_response(int(ErrorCode.invalid_fetch_session_epoch), 0, [])
    assert handler.build({FOO0: (0, 100)}).metadata == FetchMetadata(123, 0)

    handler = started()
    handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    handler.handle_error()  # the request failed: close and reopen
    assert handler.build({FOO0: (0, 100)}).metadata == FetchMetadata(123, 0)


def test_answers_that_do_not_match_the_session_are_refused() -> None:
    handler: FetchSessionHandler[tuple[int, int]] = FetchSessionHandler(node=1)
    handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert not handler.handle_response(NONE, 123, [FOO0])  # a full answer omits foo-1
    assert handler.build({FOO0: (0, 100)}).metadata == FetchMetadata(0, 0)

    handler = started()
    handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert not handler.handle_response(NONE, 123, [BAR0])  # not in the session
    assert handler.build({FOO0: (0, 100)}).metadata == FetchMetadata(123, 0)


def test_the_leader_closing_the_session_makes_the_next_request_full() -> None:
    handler = started()
    handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert handler.handle_response(NONE, 0, [FOO0])
    assert handler.build({FOO0: (0, 100)}).metadata == FetchMetadata(0, 0)


def test_epochs_wrap_to_one() -> None:
    handler = started()
    handler.next_metadata = FetchMetadata(123, 2**31 - 1)
    handler.build({FOO0: (0, 100), FOO1: (10, 110)})
    assert handler.handle_response(NONE, 123, [])
    assert handler.next_metadata == FetchMetadata(123, 1)


def test_the_mapping_built_last_time_is_the_session_unchanged() -> None:
    handler = started()
    wanted = {FOO0: (5, 100), FOO1: (10, 110)}
    changed = handler.build(wanted)
    assert changed.to_send == {FOO0: (5, 100)}
    assert handler.handle_response(NONE, 123, [])
    again = handler.build(wanted)  # the same object: nothing to compare
    assert (again.to_send, again.to_forget) == ({}, [])
    assert again.metadata == FetchMetadata(123, 2)
    assert dict(again.session_partitions) == wanted
