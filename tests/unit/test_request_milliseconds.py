"""Request timeouts and waits come from kio as ``timedelta``s; handlers read them back as the
exact int32 milliseconds the client sent."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from storage_core.server.handlers.common import milliseconds


def test_a_value_a_float_conversion_rounds_down_comes_back_whole() -> None:
    sent = datetime.timedelta(milliseconds=259_715)
    assert int(sent.total_seconds() * 1000) == 259_714  # why not through a float
    assert milliseconds(sent) == 259_715


@given(st.integers(-(2**31), 2**31 - 1))
def test_every_int32_comes_back_as_sent(value: int) -> None:
    assert milliseconds(datetime.timedelta(milliseconds=value)) == value
