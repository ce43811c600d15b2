"""``python -m cdc_codecs``: JSON lines out, one-line errors with exit code 2."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_codecs.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], capsysbinary) -> tuple[int, list[dict], str]:
    code = main(args)
    out, err = capsysbinary.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err.decode()


def test_decodes_files_to_json_lines(conformance: Path, capsysbinary) -> None:
    files = sorted(str(p) for p in (conformance / "ticdc-canal-json/docs").glob("*.json"))
    code, lines, err = run(["decode", "--protocol", "canal-json", *files], capsysbinary)
    assert code == 0 and err == ""
    assert [l["event"] for l in lines] == ["watermark", "ddl", "row"]
    row = lines[2]
    assert row["after"]["c_bigint"] == 9223372036854775807 and row["types"]["c_bigint"] == "bigint"
    assert row["position"] == "docs-cn__L91__dml-insert.json/0@2[0]"


def test_key_value_pairs_for_open_protocol(conformance: Path, capsysbinary) -> None:
    base = conformance / "ticdc-open-protocol/binary"
    code, lines, _ = run(
        ["decode", "--protocol", "open-protocol",
         "--key", str(base / "key/ddl_key_1"), "--value", str(base / "value/ddl_value_1"),
         "--key", str(base / "key/rts_key_0"), "--value", str(base / "value/rts_value_0")],
        capsysbinary,
    )
    assert code == 0
    assert [(l["event"], l.get("sql") or l.get("ts")) for l in lines] == [
        ("ddl", "create table a"), ("ddl", "create table b"), ("ddl", "create table c"), ("watermark", 1),
    ]


def test_binary_and_decimal_values_render(conformance: Path, capsysbinary) -> None:
    path = conformance / "canal-flat/paimon/table__alltype__canal-data__L19.json"
    code, lines, _ = run(["decode", "--protocol", "canal", str(path)], capsysbinary)
    assert code == 0
    # A BINARY(10) column: Canal passes on the binlog's value without its trailing zero bytes; MySQL
    # holds b'bytes' padded to 10 with 0x00, and so does the decoder (cdc_codecs.types.stored_binary).
    assert lines[0]["after"]["_bin"] == {"base64": "Ynl0ZXMAAAAAAA=="}
    assert base64.b64decode("Ynl0ZXMAAAAAAA==") == b"bytes" + b"\0" * 5
    assert lines[0]["after"]["pt"] == "1.1" and lines[0]["after"]["_time"] == "10:13:23"


@pytest.mark.parametrize(
    "args, message",
    [
        (["decode", "--protocol", "canal-xml", "x"], "error: unknown protocol 'canal-xml'; known protocols:"),
        (["decode", "--protocol", "canal-json", "/no/such/file"], "error: /no/such/file: cannot read:"),
        (["decode", "--protocol", "canal-json", "--option", "tz"], "error: --option 'tz': expected key=value"),
        (["decode", "--protocol", "canal-json", "--option", "colour=red", "x"], "unknown option(s) colour"),
        (["decode", "--protocol", "open-protocol", "--key", "k"], "error: --key and --value must be given in pairs"),
    ],
)
def test_usage_errors(args: list[str], message: str, capsysbinary) -> None:
    code, _, err = run(args, capsysbinary)
    assert code == 2
    assert err.startswith(message) or message in err
    assert len(err.strip().splitlines()) == 1


def test_bad_message_names_the_file(tmp_path: Path, capsysbinary) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "UPDATE", "database": "d", "isDdl": false, "data": [{"id": "1"}], "mysqlType": {"id": "int"}, '
                   '"_tidb": {"commitTs": 1}}')
    code, _, err = run(["decode", "--protocol", "canal-json", str(bad)], capsysbinary)
    assert code == 2
    assert err == f"error: {bad}: canal-json bad.json/0@0[0]: old: missing when 'type' is 'UPDATE'\n"


def test_module_entry_point(conformance: Path) -> None:
    path = conformance / "ticdc-simple/json/docs-cn__L372__watermark.json"
    proc = subprocess.run([sys.executable, "-m", "cdc_codecs", "decode", "--protocol", "simple", str(path)],
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"event": "watermark", "ts": 447984124732375041, "clock": "tso",
                                       "position": "docs-cn__L372__watermark.json/0@0[0]"}
