"""Durations in words for the status page (pure)."""

from __future__ import annotations


def human_duration(seconds: float) -> str:
    total = int(seconds)
    if total < 60:
        return f"{total} s"
    minutes, _ = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} days {hours % 24} h"
