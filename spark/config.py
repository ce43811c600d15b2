"""Pipeline configuration: what a pipeline reads, where it archives, how it starts.

Built from a plain mapping (a YAML/JSON file's content) by ``PipelineConfig.from_mapping``,
which rejects unknown keys and wrong types with the key's path, so a typo fails when the
DAG is parsed rather than at 3 a.m.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cdc_codecs import PROTOCOLS, ConfigError, get_decoder, protocol_spec

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
START_MODES = ("earliest", "latest")
MAX_BUCKETS = 65_536  # beyond this every bucket is a tiny file; a typo more likely than a plan


@dataclass(frozen=True)
class TopicConfig:
    name: str
    protocol: str
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StorageConfig:
    """Where the archive lives: a local path or ``file://`` URL (default), or ``s3://bucket/prefix``.

    S3 credentials come from here or, when absent, from the standard AWS environment
    variables; they are never written to manifests, reports or logs.
    """

    url: str
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class CatalogConfig:
    """The Iceberg catalog: ``sql`` (SQLite by default, PostgreSQL by URI) or ``rest``.

    ``properties`` go to pyiceberg's ``load_catalog`` as they are (e.g. ``uri``,
    ``warehouse``, REST ``credential``), after tidelake's defaults.
    """

    type: str = "sql"
    namespace: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class ScheduleConfig:
    """How the pipeline's Airflow DAG runs: one run per cron interval [start, end)."""

    cron: str = "0 * * * *"
    start_date: str = "2024-01-01T00:00:00Z"
    catchup: bool = False
    retries: int = 2
    spark_conn_id: str = "spark_default"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    end_date: str | None = None  # a bounded pipeline (a migration window, a test): no interval ends after it
    # Longest any one task may run ("90s", "45m", "2h", "1h30m"): a hung spark-submit is killed and
    # retried instead of holding the pipeline's only active run forever. None: no limit.
    execution_timeout: dt.timedelta | None = dt.timedelta(hours=1)
    # The Airflow pool every task of the pipeline runs in; a shared pool bounds concurrent Spark jobs.
    pool: str = "default_pool"


MERGE_ON_READ, COPY_ON_WRITE = "merge-on-read", "copy-on-write"
WRITE_MODES = (MERGE_ON_READ, COPY_ON_WRITE)
OMITTED_COLUMNS = ("hold", "null")  # ``PipelineConfig.omitted_columns``


@dataclass(frozen=True)
class LayoutConfig:
    """How tidelake lays out the Iceberg tables it creates (``[layout]``).

    ``buckets = N`` (N > 0) partitions every keyed table by ``bucket(first key column, N)`` and
    sorts it by the key, so a change batch rewrites only the touched keys' buckets; pick N so a
    bucket holds a few target-size files (e.g. table bytes / 256 MiB). It needs pyiceberg-core
    installed where tables are created and written. ``0`` (the default): unpartitioned and
    unsorted, as before. Only new tables get the layout; existing ones keep theirs. The default
    stays 0 because pyiceberg 0.12 cannot write a table whose bucket column was dropped (a
    DDL dropping the first key column then fails that table, naming the fix) and small tables
    would get N small files per run; tables of millions of rows want N (``bench apply --buckets``).

    ``write_mode`` is how a run drops the rows of touched keys from existing data files, Iceberg's
    ``write.update.mode``: ``"merge-on-read"`` (the default) writes a small position delete file per
    touched data file (only the key column is read), so a batch costs about the same however large
    the table; readers apply the deletes until compaction (``tidelake maintain``) folds them into
    the data files. ``"copy-on-write"`` rewrites each touched file without those rows: reads stay
    free of deletes, a batch costs the bytes of every file it touches. Both apply to every table,
    old and new; the tables' ``write.*.mode`` properties record it for other engines.
    """

    buckets: int = 0
    write_mode: str = MERGE_ON_READ

    @property
    def merge_on_read(self) -> bool:
        return self.write_mode == MERGE_ON_READ


@dataclass(frozen=True)
class MaintenanceConfig:
    """Table maintenance (``[maintenance]``): which watermarks stay readable and what may be deleted.

    Retention works like backup retention, on each published W's wall time ((W >> 18) ms):
    every W younger than ``keep_all``; the last W of each UTC hour younger than ``keep_hourly``;
    the last W of each UTC day younger than ``keep_daily``. The latest published W is always
    kept. A tier of zero keeps nothing of its own.
    """

    keep_all: dt.timedelta = dt.timedelta(days=2)
    keep_hourly: dt.timedelta = dt.timedelta(days=30)
    keep_daily: dt.timedelta = dt.timedelta(days=365)
    # Files younger than this are never deleted: a concurrent writer (another engine, a run that
    # lost its lease) may still be about to commit them.
    grace_period: dt.timedelta = dt.timedelta(hours=1)
    # bytes; compaction bin-packs small files (under 3/4 of this: ``files.is_small``) to this, and a
    # merge-on-read run merges small files into the files it writes (``upsert.small_file_merges``)
    target_file_size: int = 128 * 1024 * 1024
    # How old raw segments and change-log segments may get before archive retention may delete
    # them (None: never; the archive then stays the full source of truth).
    archive_horizon: dt.timedelta | None = None
    schedule: str = "0 3 * * *"  # cron (UTC) of the pipeline's maintenance DAG


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    bootstrap_servers: str
    topics: tuple[TopicConfig, ...]
    storage: StorageConfig
    # First run: "earliest", "latest", or an ISO-8601 instant (offsets_for_times).
    start: str = "earliest"
    # A partition whose start offset retention already deleted: "fail" or "skip" (record the gap).
    on_missing_offsets: str = "fail"
    segment_max_messages: int = 50_000
    # Change-log rows one fold task holds at most (a Python worker holds ~0.9 GB at 1M): a run
    # is cut into more key-hash slices than task slots when it has more rows than slots x this.
    fold_slice_rows: int = 1_000_000
    # A land or apply whose interval reads at most this many messages runs in the job's driver
    # process and never starts Spark (its context, executors and Python workers cost seconds a
    # small interval does not need); larger ones run on Spark. 0: always Spark.
    driver_max_messages: int = 100_000
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    # An undecodable message: "fail" the run (after quarantining it) or "continue".
    on_bad_message: str = "fail"
    # One table's DDL or value tidelake cannot apply: "isolate" the table (held at its last good
    # W, the others go on; spark.commit.isolation) or "fail" the run.
    on_table_error: str = "isolate"
    # Rows lacking a column their table has: "hold" the table (it cannot be told whether upstream
    # left the column out as unchanged -- binlog_row_image NOBLOB or MINIMAL -- or filters it out),
    # or write the column "null" (a filter). None: "hold" when a topic's protocol may send after
    # images without their unchanged columns (``ProtocolSpec.whole_rows``), else "null".
    omitted_columns: str | None = None
    schedule: ScheduleConfig = field(default_factory=lambda: ScheduleConfig())
    # The pipeline's lease (one run at a time): how long it lives without renewal, and how long
    # a run waits for another run's lease before failing.
    lease_ttl_seconds: float = 600.0
    lease_wait_seconds: float = 0.0
    layout: LayoutConfig = field(default_factory=LayoutConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)

    @property
    def whole_rows(self) -> bool:
        """Whether every topic's upstream sends whole rows (not Canal: its after images may lack the
        columns a statement left unchanged, under MySQL's binlog_row_image NOBLOB or MINIMAL)."""
        return all(protocol_spec(t.protocol).whole_rows for t in self.topics)

    @property
    def holds_omitted_columns(self) -> bool:
        """Whether a table whose rows lack one of its columns is held (``omitted_columns``)."""
        if self.omitted_columns is not None:
            return self.omitted_columns == "hold"
        return not self.whole_rows

    @property
    def namespace(self) -> str:
        return self.catalog.namespace or self.name

    @property
    def start_time(self) -> dt.datetime | None:
        if self.start in START_MODES:
            return None
        return parse_instant(self.start, "start", also=START_MODES)

    @staticmethod
    def from_mapping(doc: Mapping[str, Any], source: str = "<config>") -> PipelineConfig:
        return _parse_pipeline(doc, source)


def parse_instant(text: str, where: str, also: tuple[str, ...] = ()) -> dt.datetime:
    """An ISO-8601 instant with a time zone, in UTC; errors echo ``text`` as the user typed it.

    ``also``: words the caller accepts besides a time (named in the error, handled by the caller).
    """
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        words = "".join(f"{w!r}, " for w in also[:-1]) + (f"{also[-1]!r} or " if also else "")
        raise ConfigError(f"{where}: expected {words}an ISO-8601 time such as 2024-01-01T00:00:00Z, found {text!r}") from None
    if value.tzinfo is None:
        raise ConfigError(f"{where}: {text!r} has no time zone; write it in UTC with a trailing Z")
    return value.astimezone(dt.timezone.utc)


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str, where: str) -> dt.timedelta | None:
    """``"90s"``, ``"45m"``, ``"2h"``, ``"1h30m"``; ``"none"`` for no limit."""
    if text == "none":
        return None
    match = _DURATION.match(text)
    if not text or not match or not any(match.groups()):
        raise ConfigError(f"{where}: expected a duration such as '45m', '2h' or '1h30m' (or 'none'), found {text!r}")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    value = dt.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    if not value:
        raise ConfigError(f"{where}: expected a positive duration (or 'none'), found {text!r}")
    return value


_SPAN = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_span(text: str, where: str, *, allow_zero: bool = True, none_words: tuple[str, ...] = ()) -> dt.timedelta | None:
    """A length of time for retention and grace: ``"2d"``, ``"30d"``, ``"12h"``, ``"1d12h"``, ``"90m"``, ``"45s"``.

    Units from largest to smallest, each once (d = 24 h; no months or years, whose length varies).
    ``none_words`` (e.g. ``("none", "off")``): words meaning "no limit", returned as None.
    """
    if text in none_words:
        return None
    match = _SPAN.match(text)
    if not text or not match or not any(match.groups()):
        nones = "".join(f" or {w!r}" for w in none_words)
        raise ConfigError(f"{where}: expected a duration such as '2d', '12h', '1d12h' or '90m'{nones}, found {text!r}")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    value = dt.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    if not value and not allow_zero:
        raise ConfigError(f"{where}: expected a positive duration, found {text!r}")
    return value


_SIZE = re.compile(r"^(\d+)\s*(B|KiB|MiB|GiB|TiB)?$")
_SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def parse_size(value: Any, where: str) -> int:
    """A byte size: an integer, or ``"128MiB"``, ``"512KiB"``, ``"1GiB"`` (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        match = _SIZE.match(value) if isinstance(value, str) else None
        if not match:
            raise ConfigError(f"{where}: expected a size such as '128MiB', '512KiB' or '1GiB' (or bytes), found {value!r}")
        size = int(match.group(1)) * _SIZE_UNITS[match.group(2) or "B"]
    if size <= 0:
        raise ConfigError(f"{where}: expected a positive size, found {value!r}")
    return size


def _check_cron(cron: str, where: str) -> None:
    if len(cron.split()) != 5:
        raise ConfigError(f"{where}: expected a 5-field cron expression such as '0 * * * *', found {cron!r}")
    from croniter import croniter  # Airflow's own cron parser: what it rejects, reject here

    if not croniter.is_valid(cron):
        raise ConfigError(f"{where}: expected a valid cron expression such as '0 * * * *', found {cron!r}")


def _parse_maintenance(section: _Reader, source: str) -> MaintenanceConfig:
    defaults = MaintenanceConfig()

    def span(key: str, default: dt.timedelta | None, **kw: Any) -> dt.timedelta | None:
        text = section.get(key, str, None)
        return default if text is None else parse_span(text, f"{source}: maintenance.{key}", **kw)

    size = section.get("target_file_size", (int, str), None)
    config = MaintenanceConfig(
        keep_all=span("keep_all", defaults.keep_all),  # type: ignore[arg-type]
        keep_hourly=span("keep_hourly", defaults.keep_hourly),  # type: ignore[arg-type]
        keep_daily=span("keep_daily", defaults.keep_daily),  # type: ignore[arg-type]
        grace_period=span("grace_period", defaults.grace_period),  # type: ignore[arg-type]
        target_file_size=defaults.target_file_size if size is None else parse_size(size, f"{source}: maintenance.target_file_size"),
        archive_horizon=span("archive_horizon", None, allow_zero=False, none_words=("none", "off")),
        schedule=section.get("schedule", str, defaults.schedule),
    )
    _check_cron(config.schedule, f"{source}: maintenance.schedule")
    section.done()
    return config


class _Reader:
    """Typed access to one mapping, with errors that name the file and the key path."""

    def __init__(self, doc: Any, source: str, path: str) -> None:
        if not isinstance(doc, Mapping):
            raise ConfigError(f"{source}: {path or 'top level'}: expected a mapping, found {type(doc).__name__}")
        self.doc, self.source, self.path = doc, source, path
        self.used: set[str] = set()

    def _where(self, key: str) -> str:
        return f"{self.source}: {self.path + '.' if self.path else ''}{key}"

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., *, choices: tuple[str, ...] = ()) -> Any:
        self.used.add(key)
        if key not in self.doc:
            if default is ...:
                raise ConfigError(f"{self._where(key)}: required, missing")
            return default
        value = self.doc[key]
        if kind is not bool and isinstance(value, bool) or not isinstance(value, kind):
            expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise ConfigError(f"{self._where(key)}: expected {expected}, found {type(value).__name__} {value!r}")
        if choices and value not in choices:
            raise ConfigError(f"{self._where(key)}: expected one of {', '.join(choices)}, found {value!r}")
        return value

    def child(self, key: str, default: Any = ...) -> _Reader | None:
        value = self.get(key, Mapping, default)
        return None if value is None else _Reader(value, self.source, f"{self.path + '.' if self.path else ''}{key}")

    def done(self) -> None:
        unknown = sorted(set(self.doc) - self.used)
        if unknown:
            raise ConfigError(f"{self._where(unknown[0])}: unknown key; known keys here: {', '.join(sorted(self.used))}")


def _check_decoder_options(protocol: str, options: Mapping[str, str], source: str, path: str) -> None:
    """A topic's decoder options as its protocol's decoder will take them: fail at parse time, not in a run."""
    known = protocol_spec(protocol).decoder.options_spec
    for key, value in options.items():
        if key not in known:
            raise ConfigError(f"{source}: {path}.{key}: unknown option of protocol {protocol!r}; "
                              f"known options: {', '.join(sorted(known)) or 'none'}")
        try:
            known[key].parse(value)
        except ValueError as exc:
            found = "" if repr(value) in str(exc) else f", found {value!r}"  # echo what the file says, once
            raise ConfigError(f"{source}: {path}.{key}: {exc}{found}") from None
    try:  # what only the decoder sees: options that are valid alone but not together
        get_decoder(protocol, **options)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {path}: {exc}") from None


def _parse_pipeline(doc: Mapping[str, Any], source: str) -> PipelineConfig:
    r = _Reader(doc, source, "")
    name = r.get("name", str)
    if not _NAME.match(name):
        raise ConfigError(f"{source}: name: expected letters, digits, '_', '.', '-' (used in paths and DAG ids), found {name!r}")
    kafka = r.child("kafka")
    assert kafka is not None
    bootstrap = kafka.get("bootstrap_servers", str)
    kafka_options = {str(k): str(v) for k, v in kafka.get("options", Mapping, {}).items()}
    kafka.done()
    topics = []
    raw_topics = r.get("topics", list)
    if not raw_topics:
        raise ConfigError(f"{source}: topics: at least one topic is required")
    for i, t in enumerate(raw_topics):
        tr = _Reader(t, source, f"topics[{i}]")
        protocol = tr.get("protocol", str, choices=tuple(sorted(PROTOCOLS)))
        options = {str(k): str(v) for k, v in tr.get("options", Mapping, {}).items()}
        _check_decoder_options(protocol, options, source, f"topics[{i}].options")
        topics.append(TopicConfig(tr.get("name", str), protocol, options))
        tr.done()
    storage = r.child("storage")
    assert storage is not None
    url = storage.get("url", str)
    if not (url.startswith(("file://", "s3://", "/")) or "://" not in url):
        raise ConfigError(f"{source}: storage.url: expected a local path, file:// or s3:// URL, found {url!r}")
    storage_config = StorageConfig(
        url,
        storage.get("endpoint_url", str, None),
        storage.get("region", str, None),
        storage.get("access_key_id", str, None),
        storage.get("secret_access_key", str, None),
    )
    storage.done()
    catalog = r.child("catalog", None)
    catalog_config = CatalogConfig()
    if catalog is not None:
        catalog_config = CatalogConfig(
            catalog.get("type", str, "sql", choices=("sql", "rest")),
            catalog.get("namespace", str, None),
            {str(k): str(v) for k, v in catalog.get("properties", Mapping, {}).items()},
        )
        catalog.done()
    schedule = r.child("schedule", None)
    schedule_config = ScheduleConfig()
    if schedule is not None:
        defaults = ScheduleConfig()
        timeout = schedule.get("execution_timeout", str, None)
        schedule_config = ScheduleConfig(
            cron=schedule.get("cron", str, defaults.cron),
            start_date=schedule.get("start_date", str, defaults.start_date),
            catchup=schedule.get("catchup", bool, defaults.catchup),
            retries=schedule.get("retries", int, defaults.retries),
            spark_conn_id=schedule.get("spark_conn_id", str, defaults.spark_conn_id),
            spark_conf={str(k): str(v) for k, v in schedule.get("spark_conf", Mapping, {}).items()},
            end_date=schedule.get("end_date", str, None),
            execution_timeout=(defaults.execution_timeout if timeout is None
                               else parse_duration(timeout, f"{source}: schedule.execution_timeout")),
            pool=schedule.get("pool", str, defaults.pool),
        )
        if not schedule_config.pool:
            raise ConfigError(f"{source}: schedule.pool: expected an Airflow pool name, found ''")
        parse_instant(schedule_config.start_date, f"{source}: schedule.start_date")
        if schedule_config.end_date is not None:
            parse_instant(schedule_config.end_date, f"{source}: schedule.end_date")
        _check_cron(schedule_config.cron, f"{source}: schedule.cron")
        schedule.done()
    layout = r.child("layout", None)
    layout_config = LayoutConfig()
    if layout is not None:
        layout_config = LayoutConfig(buckets=layout.get("buckets", int, LayoutConfig.buckets),
                                     write_mode=layout.get("write_mode", str, LayoutConfig.write_mode, choices=WRITE_MODES))
        if not 0 <= layout_config.buckets <= MAX_BUCKETS:
            raise ConfigError(f"{source}: layout.buckets: expected 0 (unpartitioned) to {MAX_BUCKETS}, found {layout_config.buckets}")
        layout.done()
    maintenance = r.child("maintenance", None)
    maintenance_config = MaintenanceConfig() if maintenance is None else _parse_maintenance(maintenance, source)
    config = PipelineConfig(
        name=name,
        bootstrap_servers=bootstrap,
        topics=tuple(topics),
        storage=storage_config,
        start=r.get("start", str, "earliest"),
        on_missing_offsets=r.get("on_missing_offsets", str, "fail", choices=("fail", "skip")),
        segment_max_messages=r.get("segment_max_messages", int, 50_000),
        fold_slice_rows=r.get("fold_slice_rows", int, 1_000_000),
        driver_max_messages=r.get("driver_max_messages", int, PipelineConfig.driver_max_messages),
        kafka_options=kafka_options,
        catalog=catalog_config,
        on_bad_message=r.get("on_bad_message", str, "fail", choices=("fail", "continue")),
        on_table_error=r.get("on_table_error", str, "isolate", choices=("fail", "isolate")),
        omitted_columns=r.get("omitted_columns", str, None, choices=OMITTED_COLUMNS),
        schedule=schedule_config,
        lease_ttl_seconds=float(r.get("lease_ttl_seconds", (int, float), 600)),
        lease_wait_seconds=float(r.get("lease_wait_seconds", (int, float), 0)),
        layout=layout_config,
        maintenance=maintenance_config,
    )
    config.start_time  # validates the start instant  # noqa: B018
    if config.segment_max_messages < 1:
        raise ConfigError(f"{source}: segment_max_messages: expected a positive integer, found {config.segment_max_messages}")
    if config.fold_slice_rows < 1:
        raise ConfigError(f"{source}: fold_slice_rows: expected a positive integer, found {config.fold_slice_rows}")
    if config.driver_max_messages < 0:
        raise ConfigError(f"{source}: driver_max_messages: expected 0 (always Spark) or a positive integer, "
                          f"found {config.driver_max_messages}")
    r.done()
    return config


def load_pipeline_config(path: str) -> PipelineConfig:
    """Read a pipeline file: TOML (``.toml``), JSON (``.json``) or YAML (``.yaml``/``.yml``)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        if p.suffix == ".toml":
            doc = tomllib.loads(text)
        elif p.suffix == ".json":
            doc = json.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            import yaml  # PyYAML: a dependency of the `pipeline` extra

            try:
                doc = yaml.safe_load(text)
            except yaml.YAMLError as exc:  # not a ValueError
                raise ValueError(" ".join(str(exc).split())) from None
        else:
            raise ConfigError(f"{path}: expected a .toml, .json, .yaml or .yml file, found {p.suffix or 'no suffix'!r}")
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {p.suffix[1:].upper()}: {exc}") from None
    return PipelineConfig.from_mapping(doc, str(path))
