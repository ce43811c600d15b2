"""`python -m bench decode` at a tiny size: per protocol the decode stage against the plain parse, by stage."""

from __future__ import annotations

import pytest

import re

from bench import decode

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def test_the_decode_bench_prints_the_stage_against_the_parse_and_its_parts_per_protocol(capsys) -> None:  # noqa: ANN001
    assert decode.main(["--messages", "1500", "--protocols", "canal-json,canal", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for protocol in ("canal-json", "canal"):
        assert re.search(rf"^{protocol} +[\d,]+ messages: parse +[\d.]+  decode stage +[\d.]+  decode vs parse: [\d.]+x$",
                         out, re.M), out
    assert len(re.findall(r"per-change path, each part alone: raw read [\d.]+, decoder [\d.]+, writer [\d.]+, images "
                          r"[\d.]+, key bytes [\d.]+, rows, sort, Parquet [\d.]+$", out, re.M)) == 2, out
    # Only TiCDC's Canal-JSON has the column-wise path.
    assert len(re.findall(r"column-wise path, inside the stage: raw read [\d.]+, parse \+ check [\d.]+, columns, images, "
                          r"keys [\d.]+", out)) == 1, out
