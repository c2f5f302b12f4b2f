"""How the metadata soak judges "flat" (``tests.metadata_soak.flat_problems``): a sawtooth
whose brief spikes happen to be caught higher in one third is flat; one whose level rises is
not."""

from __future__ import annotations

from tests.metadata_soak import Sample, flat_problems

# metadata_bytes_per_live_segment of a CI run of the short variant (a sample a second) that
# the largest-but-one peak judged grown: 954 in the last third against 765 in the second,
# while the first third had reached 898 and the means were 488 and 453.
CI_RUN_TEXT = """
    0.0 0.0 0.0 0.0 0.0 0.0 0.0 466.5 466.5 466.5 466.5 466.5 466.5 383.9 383.9 383.9 383.9
    383.9 383.9 552.5 457.2 457.2 457.2 457.2 457.2 570.6 570.6 570.6 570.6 570.6 570.6 840.4
    898.0 684.8 744.2 248.4 248.4 421.2 421.2 421.2 421.2 421.2 421.2 691.0 759.3 517.9 517.9
    195.6 195.6 357.9 357.9 357.9 357.9 357.9 357.9 730.6 730.6 687.2 240.7 240.7 240.7 385.3
    385.3 385.3 385.3 385.3 385.3 704.9 765.2 879.0 399.0 399.0 399.0 532.0 511.0 511.0 305.2
    305.2 305.2 492.7 667.8 667.8 277.0 277.0 277.0 423.8 412.8 412.8 412.8 412.8 412.8 777.8
    777.8 777.8 973.1 247.9 247.9 408.0 398.9 398.9 398.9 398.9 398.9 751.4 753.2 753.2 948.9
    219.1 219.1 389.3 378.1 378.1 378.1 378.1 378.1 694.2 758.4 758.4 953.7 260.8 260.8 420.3
    400.3 400.3 400.3 400.3 400.3
"""
CI_RUN = [float(value) for value in CI_RUN_TEXT.split()]


def samples(bytes_per_segment: list[float]) -> list[Sample]:
    return [
        Sample(
            elapsed_s=float(i),
            rss_bytes=100 << 20,
            open_fds=200,
            metadata_bytes=round(value * 1000),
            metadata_records=1000,
            live_segments=1000,
        )
        for i, value in enumerate(bytes_per_segment)
    ]


def test_spikes_caught_higher_in_one_third_are_not_growth() -> None:
    assert len(CI_RUN) == 127
    assert flat_problems(samples(CI_RUN)) == []


def test_a_sawtooth_that_rises_is_growth() -> None:
    third = len(CI_RUN) // 3
    rising = CI_RUN[: 2 * third] + [value * 1.3 for value in CI_RUN[2 * third :]]
    (problem, *others) = flat_problems(samples(rising))
    assert problem.startswith("metadata_bytes_per_live_segment grew: peak")
    assert [p.split(":")[0] for p in others] == ["metadata_bytes_per_live_segment grew"]
