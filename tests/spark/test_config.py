"""Pipeline files: topic decoder options checked at parse time, and every supported file format."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from cdc_codecs import PROTOCOLS, ConfigError, protocol_spec
from spark.config import PipelineConfig, load_pipeline_config

ROOT = Path(__file__).resolve().parents[2]


def pipeline_doc(options: dict[str, str], protocol: str = "canal-json") -> dict:
    return {"name": "p", "kafka": {"bootstrap_servers": "k:9092"},
            "topics": [{"name": "t", "protocol": protocol, "options": options}], "storage": {"url": "/tmp/x"}}


def test_a_misspelt_topic_option_names_the_file_the_key_and_the_known_options() -> None:
    known = sorted(protocol_spec("canal-json").decoder.options_spec)
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_mapping(pipeline_doc({"timezon": "Asia/Shanghai"}), "prod.toml")
    assert str(err.value) == (f"prod.toml: topics[0].options.timezon: unknown option of protocol 'canal-json'; "
                              f"known options: {', '.join(known)}")
    assert "timezone" in known


def test_a_topic_option_value_is_parsed_with_the_decoder_s_own_parser() -> None:
    with pytest.raises(ConfigError, match=re.escape("prod.toml: topics[0].options.timezone: unknown time zone 'Mars/Olympus'")):
        PipelineConfig.from_mapping(pipeline_doc({"timezone": "Mars/Olympus"}), "prod.toml")
    with pytest.raises(ConfigError, match=re.escape("prod.toml: topics[0].options.encoding: expected json or avro, found 'xml'")):
        PipelineConfig.from_mapping(pipeline_doc({"encoding": "xml"}, "simple"), "prod.toml")
    config = PipelineConfig.from_mapping(pipeline_doc({"timezone": "+08:00"}), "prod.toml")
    assert config.topics[0].options == {"timezone": "+08:00"}


def test_toml_json_and_yaml_files_give_the_same_pipeline(tmp_path: Path) -> None:
    doc = pipeline_doc({"timezone": "UTC"})
    (tmp_path / "p.json").write_text(json.dumps(doc))
    (tmp_path / "p.yaml").write_text(
        "name: p\nkafka:\n  bootstrap_servers: k:9092\ntopics:\n  - name: t\n    protocol: canal-json\n"
        "    options:\n      timezone: UTC\nstorage:\n  url: /tmp/x\n")
    (tmp_path / "p.toml").write_text('name = "p"\n[kafka]\nbootstrap_servers = "k:9092"\n[[topics]]\nname = "t"\n'
                                     'protocol = "canal-json"\noptions = { timezone = "UTC" }\n[storage]\nurl = "/tmp/x"\n')
    expected = PipelineConfig.from_mapping(doc, "x")
    for suffix in ("json", "yaml", "toml"):
        assert load_pipeline_config(str(tmp_path / f"p.{suffix}")) == expected, suffix


def test_unreadable_and_malformed_files_are_config_errors_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=re.escape(f"{missing}: cannot read: No such file or directory")):
        load_pipeline_config(str(missing))
    bad_yaml = tmp_path / "bad.yml"
    bad_yaml.write_text("name: p\n  kafka: [\n")
    with pytest.raises(ConfigError, match=re.escape(f"{bad_yaml}: not valid YML: ")) as err:
        load_pipeline_config(str(bad_yaml))
    assert "\n" not in str(err.value)
    ini = tmp_path / "p.ini"
    ini.write_text("x")
    with pytest.raises(ConfigError, match=re.escape(f"{ini}: expected a .toml, .json, .yaml or .yml file, found '.ini'")):
        load_pipeline_config(str(ini))


def test_yaml_support_is_declared_where_the_loader_runs() -> None:
    """load_pipeline_config imports yaml: the `pipeline` extra must bring PyYAML, and the lock must pin it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(re.match(r"pyyaml\b", req, re.IGNORECASE) for req in extras["pipeline"])
    assert re.search(r"^PyYAML==", (ROOT / "requirements.lock").read_text(), re.MULTILINE | re.IGNORECASE)


def test_maintenance_defaults_are_the_documented_ones() -> None:
    import datetime as dt

    from spark.config import MaintenanceConfig

    m = PipelineConfig.from_mapping(pipeline_doc({}), "p.toml").maintenance
    assert m == MaintenanceConfig()
    assert (m.keep_all, m.keep_hourly, m.keep_daily) == (dt.timedelta(days=2), dt.timedelta(days=30), dt.timedelta(days=365))
    assert (m.grace_period, m.target_file_size, m.archive_horizon, m.schedule) == (dt.timedelta(hours=1), 128 << 20, None, "0 3 * * *")


def test_maintenance_section_parses_durations_sizes_and_cron() -> None:
    import datetime as dt

    doc = {**pipeline_doc({}), "maintenance": {"keep_all": "12h", "keep_hourly": "7d", "keep_daily": "1d12h", "grace_period": "90m",
                                                "target_file_size": "256MiB", "archive_horizon": "400d", "schedule": "30 2 * * 0"}}
    m = PipelineConfig.from_mapping(doc, "p.toml").maintenance
    assert (m.keep_all, m.keep_hourly, m.keep_daily) == (dt.timedelta(hours=12), dt.timedelta(days=7), dt.timedelta(days=1, hours=12))
    assert (m.grace_period, m.target_file_size, m.archive_horizon, m.schedule) == (dt.timedelta(minutes=90), 256 << 20,
                                                                                   dt.timedelta(days=400), "30 2 * * 0")
    zero = PipelineConfig.from_mapping({**pipeline_doc({}), "maintenance": {"keep_all": "0s", "target_file_size": 1048576,
                                                                            "archive_horizon": "off"}}, "p.toml").maintenance
    assert (zero.keep_all, zero.target_file_size, zero.archive_horizon) == (dt.timedelta(0), 1 << 20, None)


@pytest.mark.parametrize("section, message", [
    ({"keep_all": "2 days"}, "p.toml: maintenance.keep_all: expected a duration such as '2d', '12h', '1d12h' or '90m', found '2 days'"),
    ({"keep_daily": "1y"}, "p.toml: maintenance.keep_daily: expected a duration such as '2d', '12h', '1d12h' or '90m', found '1y'"),
    ({"grace_period": 3600}, "p.toml: maintenance.grace_period: expected str, found int 3600"),
    ({"target_file_size": "128MB"}, "p.toml: maintenance.target_file_size: expected a size such as '128MiB', '512KiB' or '1GiB' (or bytes), found '128MB'"),
    ({"target_file_size": 0}, "p.toml: maintenance.target_file_size: expected a positive size, found 0"),
    ({"archive_horizon": "0d"}, "p.toml: maintenance.archive_horizon: expected a positive duration, found '0d'"),
    ({"archive_horizon": "never"}, "p.toml: maintenance.archive_horizon: expected a duration such as '2d', '12h', '1d12h' or '90m' or 'none' or 'off', found 'never'"),
    ({"schedule": "daily"}, "p.toml: maintenance.schedule: expected a 5-field cron expression such as '0 * * * *', found 'daily'"),
    ({"schedule": "0 25 * * *"}, "p.toml: maintenance.schedule: expected a valid cron expression such as '0 * * * *', found '0 25 * * *'"),
    ({"keep_weekly": "8w"}, "p.toml: maintenance.keep_weekly: unknown key; known keys here: archive_horizon, grace_period, keep_all, "
                            "keep_daily, keep_hourly, schedule, target_file_size"),
])
def test_maintenance_errors_name_the_key_and_what_was_expected(section: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_mapping({**pipeline_doc({}), "maintenance": section}, "p.toml")
    assert str(err.value) == message


def test_fold_slice_rows_defaults_to_a_million_and_must_be_positive() -> None:
    assert PipelineConfig.from_mapping(pipeline_doc({}), "p.toml").fold_slice_rows == 1_000_000
    assert PipelineConfig.from_mapping({**pipeline_doc({}), "fold_slice_rows": 250_000}, "p.toml").fold_slice_rows == 250_000
    for bad, message in ((0, "p.toml: fold_slice_rows: expected a positive integer, found 0"),
                         ("1M", "p.toml: fold_slice_rows: expected int, found str '1M'")):
        with pytest.raises(ConfigError) as err:
            PipelineConfig.from_mapping({**pipeline_doc({}), "fold_slice_rows": bad}, "p.toml")
        assert str(err.value) == message


def test_omitted_columns_hold_where_the_protocol_may_leave_unchanged_columns_out() -> None:
    """Alibaba Canal passes on MySQL's after images, which lack unchanged columns under binlog_row_image
    NOBLOB or MINIMAL: held unless the file says "null"; every other protocol sends whole rows."""
    def holds(protocol: str, **more: str) -> bool:
        return PipelineConfig.from_mapping({**pipeline_doc({}, protocol), **more}, "prod.toml").holds_omitted_columns

    assert holds("canal") and not holds("canal", omitted_columns="null")
    assert [p for p in sorted(PROTOCOLS) if holds(p)] == ["canal"]
    assert holds("debezium-mysql", omitted_columns="hold")
    with pytest.raises(ConfigError, match=r"prod.toml: omitted_columns: expected one of hold, null, found 'default'"):
        holds("canal", omitted_columns="default")


def test_on_table_error_is_isolate_unless_the_file_says_fail() -> None:
    assert PipelineConfig.from_mapping(pipeline_doc({}), "prod.toml").on_table_error == "isolate"
    assert PipelineConfig.from_mapping({**pipeline_doc({}), "on_table_error": "fail"}, "prod.toml").on_table_error == "fail"
    with pytest.raises(ConfigError, match=r"prod.toml: on_table_error.*'skip'"):
        PipelineConfig.from_mapping({**pipeline_doc({}), "on_table_error": "skip"}, "prod.toml")
