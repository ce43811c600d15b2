from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from spark.archive import layout

UTC = dt.timezone.utc


@given(st.text(min_size=0, max_size=40))
def test_any_name_encodes_to_one_safe_reversible_path_step(name: str) -> None:
    encoded = layout.encode_name(name)
    assert "/" not in encoded and encoded not in ("", ".", "..")
    assert all(c.isascii() and (c.isalnum() or c in "-_%") for c in encoded)
    assert layout.decode_name(encoded) == name


def test_hostile_topic_names_stay_inside_the_pipeline() -> None:
    path = layout.segment_path("p", "../../etc/passwd", 0, 0, 10)
    assert path.startswith("p/segments/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd/0/")
    assert layout.segment_path("p", "a.b-c_d", 3, 5, 10) == "p/segments/a%2Eb-c_d/3/00000000000000000005-00000000000000000010.parquet"


@given(st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(2999, 1, 1), timezones=st.just(UTC)),
       st.timedeltas(min_value=dt.timedelta(microseconds=1), max_value=dt.timedelta(days=400)))
def test_manifest_names_round_trip_and_sort_by_time(start: dt.datetime, length: dt.timedelta) -> None:
    end = start + length
    path = layout.manifest_path("p", start, end)
    assert layout.parse_manifest_name(path) == (start, end)
    later = layout.manifest_path("p", end, end + length)
    assert path < later


def test_change_log_paths_mirror_the_raw_segment_under_the_decoder_version() -> None:
    parquet, side = layout.changelog_paths("p", "canal-json-1", "a.b", 3, 5, 10)
    assert parquet == "p/changelog/canal-json-1/a%2Eb/3/00000000000000000005-00000000000000000010.parquet"
    assert side == parquet[: -len(".parquet")] + ".json"
    assert parquet.startswith(layout.changelog_dir("p", "canal-json-1", "a.b", 3) + "/")
    segment = layout.segment_path("p", "a.b", 3, 5, 10)
    assert parquet.rsplit("/", 1)[1] == segment.rsplit("/", 1)[1]
