"""The Data Docs as an operator reads them (the HTML files GE writes, no browser): each
expectation under its own name with its rule and columns, a failure with its offending
partition and offsets, the run and the data named, and every asset served from the site."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from expectations import (
    DESCRIPTIONS,
    PARTITION_OFFSETS_SUITE,
    QUALITY_EXPECTATIONS,
    REMOTE_SEGMENTS_SUITE,
    REPLICA_WARNINGS_SUITE,
    REPLICAS_SUITE,
    partition_offsets_suite,
    remote_segments_suite,
    replica_warnings_suite,
    replicas_suite,
)
from expectations.offline_docs import OFFLINE_DIR, make_offline
from expectations.rendering import NamedExpectation
from expectations.runner import QualityContext, pandas_frame
from jobs.tables import build_replicas
from jobs.tables.inputs import CopyOffsets
from jobs.tables.remote_segments import with_copy_offsets
from tests.unit.expectations.test_replica_suites import replica
from tests.unit.expectations.world import healthy_world, segment_id

RUN = "data_quality manual__2026-01-01T00:00:00+00:00"
SOURCE = "cluster c1 (127.0.0.1:9092)"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    quality = QualityContext(tmp_path_factory.mktemp("docs"), engine="pandas")
    world = healthy_world()
    world.set_partition(local_log_start_offset=45)  # a hole: 40..44 neither remote nor local
    segments, partitions = world.tables()
    # a copy run's record: segments 3 (20..29) and 4 (30..39), planned with an LSO of 40
    copied = CopyOffsets(high_watermark_at_copy=50, last_stable_offset_at_copy=40)
    segments = with_copy_offsets(segments, {str(segment_id(n)): copied for n in (3, 4)})
    for table, rows in ((REMOTE_SEGMENTS_SUITE, segments), (PARTITION_OFFSETS_SUITE, partitions)):
        quality.validate(table, pandas_frame(table, rows), run_name=RUN, source=SOURCE)
    # broker 3 out of the ISR: the warning suite fails, the replicas suite passes
    replicas = build_replicas([replica(b, isr=(1, 2)) for b in (1, 2, 3)])
    for suite in (REPLICAS_SUITE, REPLICA_WARNINGS_SUITE):
        quality.validate(suite, pandas_frame("replicas", replicas), run_name=RUN, source=SOURCE)
    return quality.data_docs_index.parent


def page_text(path: Path) -> str:
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", path.read_text(), flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    return re.sub(r"\s+", " ", text).replace(" .", ".")


def test_each_expectation_renders_its_name_rule_and_columns(site: Path) -> None:
    (page,) = site.glob("validations/partition_offsets/*/*/*.html")
    text = page_text(page)
    assert "None must always" not in text and "values must belong to this set" not in text
    for name in (
        "expect_no_hole_between_remote_and_local_log",
        "expect_last_stable_offset_at_least_local_log_start",
        "expect_no_partition_deletion_stuck",
    ):
        assert f"{name} : {DESCRIPTIONS[name]}" in text, name
    assert "Reads hole_before_local_log" in text
    assert "Reads delete_started_age_ms. max_value = 86400000." in text
    assert "Reads last_stable_offset , local_log_start_offset" in text
    # the failure: the offending partition with its offsets
    assert "1 unexpected values found" in text
    assert "orders 0 0.0 45.0 50.0 55.0 0.0 39.0" in text
    # the data and the run are named
    assert f"Data asset: partition_offsets of {SOURCE}" in text
    assert "data_quality_manual__2026-01-01T00:00:00+00:00" in text
    assert "__none__" not in text


def test_the_copy_lso_rule_renders_with_its_columns(site: Path) -> None:
    (page,) = site.glob("validations/remote_segments/*/*/*.html")
    text = page_text(page)
    name = "expect_copied_segment_end_below_last_stable_offset"
    assert f"{name} : {DESCRIPTIONS[name]}" in text
    assert "Reads last_stable_offset_at_copy , end_offset" in text


def test_the_suite_page_counts_columns(site: Path) -> None:
    text = page_text(site / "expectations" / "remote_segments.html")
    assert "across 0 columns" not in text
    assert "expect_no_gap_before_finished_segment" in text


def test_every_page_loads_its_assets_from_the_site(site: Path) -> None:
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 5
    for page in pages:
        source = page.read_text()
        assert not re.search(r"<(script|link|img)\b[^>]*(src|href)=\"https?://", source), page
        for local in re.findall(r"(?:src|href)=\"([^\"]*static/offline/[^\"]+)\"", source):
            assert (page.parent / local).is_file(), (page, local)
    offline = site / OFFLINE_DIR
    assert {p.name for p in offline.iterdir()} >= {
        "jquery.min.js",
        "bootstrap.min.css",
        "bootstrap.bundle.min.js",
        "data-docs-offline.js",
        "data-docs-offline.css",
    }
    index = (site / "index.html").read_text()
    order = [
        index.index(f"offline/{n}")
        for n in ("jquery.min", "bootstrap.bundle", "data-docs-offline.js")
    ]
    assert order == sorted(order)  # jQuery before the scripts that need it
    assert make_offline(site) == 0  # already rewritten: nothing changes


def test_the_replica_suites_show_by_name_with_their_rules(site: Path) -> None:
    index = (site / "index.html").read_text()  # its tables are data for a script
    for suite in (REPLICAS_SUITE, REPLICA_WARNINGS_SUITE):
        assert f"expectations/{suite}.html" in index, suite
        assert f"validations/{suite}/" in index, suite
    (page,) = site.glob(f"validations/{REPLICAS_SUITE}/*/*/*.html")
    text = page_text(page)
    for name in (
        "expect_follower_epochs_agree_with_leader",
        "expect_isr_log_end_at_least_high_watermark",
        "expect_no_partition_offline",
    ):
        assert f"{name} : {DESCRIPTIONS[name]}" in text, name
    assert f"Data asset: replicas of {SOURCE}" in text
    (page,) = site.glob(f"validations/{REPLICA_WARNINGS_SUITE}/*/*/*.html")
    text = page_text(page)
    name = "expect_no_under_replicated_partition"
    assert f"{name} : {DESCRIPTIONS[name]}" in text
    assert "1 unexpected values found" in text  # broker 3's row
    suite_page = page_text(site / "expectations" / f"{REPLICA_WARNINGS_SUITE}.html")
    assert name in suite_page


def test_every_expectation_of_the_suites_renders_by_name() -> None:
    for suite in (
        remote_segments_suite(),
        partition_offsets_suite(),
        replicas_suite(),
        replica_warnings_suite(),
    ):
        for expectation in suite.expectations:
            # a new rule must take NamedExpectation as its first base, or Data Docs show GE's
            # generic sentence without its name
            assert isinstance(expectation, NamedExpectation), expectation.expectation_type
            assert expectation.expectation_type in DESCRIPTIONS
            # and says what its rows are, or its observed value counts "rows"
            assert type(expectation).rows != NamedExpectation.rows, expectation.expectation_type


def observed_values(page: Path) -> dict[str, str]:
    """Each expectation's name -> its "Observed Value" cell (the third cell of its row in the
    results table; GE gives cells ids ``<table>-cell-<row>-<column>``)."""
    source = page.read_text()
    cells = re.split(r"<td id=\"(section-\d+-content-block-\d+-cell-\d+)-(\d)\"", source)
    found: dict[str, str] = {}
    by_row: dict[str, dict[str, str]] = {}
    for row, column, content in zip(cells[1::3], cells[2::3], cells[3::3], strict=True):
        by_row.setdefault(row, {})[column] = content
    for columns in by_row.values():
        name = re.search(r"class=\"expectation-name\"\s*>(\w+)<", columns.get("2", ""))
        if name is None or "3" not in columns:
            continue
        cell = columns["3"].split(">", 1)[1].split("</td>", 1)[0]  # after the td's attributes
        found[name.group(1)] = re.sub(
            r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", cell))
        ).strip()
    return found


def test_observed_values_say_what_was_counted(site: Path) -> None:
    """GE's own cells read "100% null" for a passed null check and "--" where no row had a
    value to check; each names the rows counted instead, and the ones not checked."""
    (segments,) = site.glob("validations/remote_segments/*/*/*.html")
    (offsets,) = site.glob("validations/partition_offsets/*/*/*.html")
    (replicas,) = site.glob(f"validations/{REPLICAS_SUITE}/*/*/*.html")
    (warnings,) = site.glob(f"validations/{REPLICA_WARNINGS_SUITE}/*/*/*.html")
    observed = {
        **observed_values(segments),
        **observed_values(offsets),
        **observed_values(replicas),
        **observed_values(warnings),
    }
    assert set(observed) == QUALITY_EXPECTATIONS, QUALITY_EXPECTATIONS ^ set(observed)
    for name, value in observed.items():
        assert value != "--" and "%" not in value, (name, value)
    # passed null checks (a problem text expected null), GE's "100% null"
    assert observed["expect_only_valid_segment_state_transitions"] == (
        "none of 7 remote segments breaks the rule"
    )
    assert observed["expect_follower_epochs_agree_with_leader"] == (
        "none of 3 replicas breaks the rule"
    )
    # no partition pending deletion: GE's "--"
    assert observed["expect_no_partition_deletion_stuck"] == (
        "nothing to check: 2 partitions not pending deletion"
    )
    assert observed["expect_no_segment_stuck_in_started_state"] == (
        "none of 1 remote segment breaks the rule; 6 not checked (not in a STARTED state)"
    )
    assert observed["expect_log_end_offset_at_least_last_stable_offset"] == (
        "none of 1 partition breaks the rule; 1 not checked"
        " (without log_end_offset or last_stable_offset)"
    )
    # the segments of the copy run's record checked, the others not
    assert observed["expect_copied_segment_end_below_last_stable_offset"] == (
        "none of 2 remote segments breaks the rule; 5 not checked"
        " (not copied by the run whose copied-segments record was given)"
    )
    # the failures
    assert observed["expect_no_hole_between_remote_and_local_log"] == (
        "1 of 2 partitions breaks the rule"
    )
    assert observed["expect_no_under_replicated_partition"] == "1 of 3 replicas breaks the rule"


def test_every_page_has_an_icon_that_exists(site: Path) -> None:
    """GE links validation pages to ``../../../static/images/favicon.ico``, one level short
    of the site's root: a 404 in the browser."""
    pages = list(site.rglob("*.html"))
    for page in pages:
        icons = re.findall(r"<link\b[^>]*\brel=\"[^\"]*icon\"[^>]*>", page.read_text())
        assert len(icons) == 1, (page, icons)
        (href,) = re.findall(r"href=\"([^\"]+)\"", icons[0])
        assert (page.parent / href).resolve() == (site / "static/images/favicon.ico").resolve()
        assert (page.parent / href).is_file(), (page, href)
