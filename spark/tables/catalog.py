"""The one place tidelake talks to an Iceberg catalog (and calls ``load_catalog``).

Upstream names are data. An upstream table ``db.table`` of a pipeline is the Iceberg table

    namespace (<pipeline namespace...>, <db as identifier>)   table <table as identifier>

so every engine reads ``<pipeline namespace>.<db>.<table>`` the way it is meant: Spark
``cat.shop.shop.orders``, Trino ``shop."shop".orders``, DuckDB ``"shop"."shop"."orders"``, and
an Iceberg SQL (JDBC) catalog row ``table_namespace = 'shop.shop'``, ``table_name = 'orders'``.
The pipeline namespace (``catalog.namespace``, default the pipeline name) is the operator's
choice and taken as pyiceberg reads it (dots separate levels); database and table names are
encoded by ``identifier_part``:

- ``[a-z0-9_]`` stay as they are, so conventional snake_case names are plain identifiers;
- every other character, uppercase letters included, becomes ``%xx`` of its UTF-8 bytes in
  lowercase hex (``my.db`` -> ``my%2edb``, ``Orders`` -> ``%4frders``, ``é`` -> ``%c3%a9``).

The result is lowercase, has no dot, and is injective, so engines that lowercase identifiers
(Trino) or match them case-insensitively (Spark, DuckDB) still find exactly one table, and
``Orders`` and ``orders`` stay two tables. Names outside ``[a-z0-9_]`` must be quoted in SQL
(``"my%2edb"``). ``identifier_name`` decodes a part; the upstream names are also kept in the
table's properties. Files live at ``<warehouse>/<namespace>/<encoded db>/<encoded table>``
(``layout.encode_name``; a table's location never changes, not even on RENAME TABLE).

A dropped table stays in the catalog, empty, so that the Ws before its DROP still read it. When
a RENAME gives its name to another table, the dropped one moves aside (``release_name``) to
``<encoded table>%00<its uuid>`` in the same namespace: no upstream name encodes to that, its
UUID, files and tags stay, and published Ws find it by UUID under the name it had then.

Catalogs written before this scheme named tables ``(<pipeline namespace>, "<db>.<table>")``;
``open_catalog`` renames those once (``migrate_identifiers``).

The catalog itself is named ``catalog_name(pipeline)``, ``tidelake_<pipeline>`` with every
character outside ``[A-Za-z0-9_]`` as ``_``: an identifier every engine takes unquoted. It is
what a SQL (JDBC) catalog keys its rows by (``catalog_name``), so another engine reading the
same database through Iceberg's JdbcCatalog must register the catalog under that name (Spark:
``spark.sql.catalog.tidelake_shop``) or set it (Trino: ``iceberg.jdbc-catalog.catalog-name``).
Catalogs written before were ``tidelake-<pipeline>``: ``open_catalog`` moves their rows to the
new name once (``migrate_catalog_name``).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from cdc_codecs import ConfigError
from spark.archive import layout
from spark.config import PipelineConfig
from spark.tables.table_layout import table_layout
from spark.tables.schema_map import metadata_property

UPSTREAM_DATABASE = "tidelake.upstream.database"
UPSTREAM_TABLE = "tidelake.upstream.table"
KEY_COLUMNS = "tidelake.key-columns"
PIPELINE = "tidelake.pipeline"


def catalog_properties(config: PipelineConfig) -> dict[str, str]:
    """tidelake's defaults (embedded SQLite next to a local archive), then the configured ones."""
    props: dict[str, str] = {"type": config.catalog.type}
    url = config.storage.url
    if config.catalog.type == "sql":
        if url.startswith("s3://"):
            if "uri" not in config.catalog.properties:
                raise ConfigError(
                    f"pipeline {config.name}: catalog.properties.uri is required when storage is S3 "
                    "(a shared SQL catalog, e.g. postgresql+psycopg2://user@host/db)"
                )
            props["warehouse"] = f"{url.rstrip('/')}/warehouse"
        else:
            root = Path(urlparse(url).path if url.startswith("file://") else url).resolve()
            root.mkdir(parents=True, exist_ok=True)
            props["uri"] = f"sqlite:///{root / 'catalog.db'}"
            props["warehouse"] = (root / "warehouse").as_uri()
    if url.startswith("s3://"):
        s = config.storage
        key = s.access_key_id or os.environ.get("AWS_ACCESS_KEY_ID")
        secret = s.secret_access_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
        props.update({k: v for k, v in {
            "s3.endpoint": s.endpoint_url, "s3.region": s.region or os.environ.get("AWS_REGION") or "us-east-1",
            "s3.access-key-id": key, "s3.secret-access-key": secret,
        }.items() if v})
    if url.startswith("s3://"):
        from spark.runtime.services import s3_fileio_properties

        props.update(s3_fileio_properties())  # the tables' S3 calls, bounded like the archive's
    props.update(config.catalog.properties)
    if props.get("uri"):
        props["uri"] = bounded_uri(props["uri"])
    return props


def bounded_uri(uri: str) -> str:
    """A PostgreSQL catalog URI with bounded waits (``spark.runtime.services``), unless it sets its own:
    ``connect_timeout`` (libpq, seconds), and server-side ``statement_timeout`` and
    ``idle_in_transaction_session_timeout`` -- the latter ends the session of a run frozen inside a
    commit's transaction (a stopped VM), so the locks it holds do not block the next run forever."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    from spark.runtime.services import CATALOG_CONNECT_TIMEOUT, CATALOG_STATEMENT_TIMEOUT

    if not uri.startswith("postgres"):
        return uri
    parts = urlsplit(uri)
    query = parse_qsl(parts.query, keep_blank_values=True)
    keys = {k for k, _ in query}
    if "connect_timeout" not in keys:
        query.append(("connect_timeout", str(CATALOG_CONNECT_TIMEOUT)))
    if "options" not in keys:
        ms = int(CATALOG_STATEMENT_TIMEOUT * 1000)
        query.append(("options", f"-c statement_timeout={ms} -c idle_in_transaction_session_timeout={ms}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


# One catalog per process and configuration: a pyiceberg SqlCatalog holds a SQLAlchemy engine
# whose compiled-statement cache makes every later call cheap (a fresh one costs ~35 ms to
# open and use). Identifiers are migrated once, when the catalog is first opened.
_CATALOGS: dict[tuple[str, str, tuple[tuple[str, str], ...]], Catalog] = {}


def catalog_name(pipeline: str) -> str:
    """The pipeline's Iceberg catalog name: ``tidelake_<pipeline>``, every character outside ``[A-Za-z0-9_]`` as ``_``.

    Pipeline names are letters, digits, ``_``, ``.`` and ``-`` (``spark.config``), so ``shop-eu.1``
    is ``tidelake_shop_eu_1``. Two pipelines whose names differ only there share a catalog name;
    in one SQL catalog database they then need different namespaces (the default namespace is
    the pipeline name, so they differ unless both set ``[catalog] namespace`` alike).
    """
    return "tidelake_" + "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in pipeline)


def legacy_catalog_name(pipeline: str) -> str:
    """The catalog name of tidelake before ``catalog_name``: a SQL identifier only when quoted."""
    return f"tidelake-{pipeline}"


def migrate_catalog_name(catalog: Catalog, config: PipelineConfig) -> tuple[int, int]:
    """Move a SQL catalog's rows from ``legacy_catalog_name`` to ``catalog.name``: (tables, namespace properties) moved.

    A JDBC catalog keys every row by its catalog name, so the rename is two UPDATEs in one
    transaction; the tables' metadata, files, snapshots and tags are untouched. Idempotent and
    safe to race (a second run finds nothing to move). A commit by a process still running the
    earlier version then fails (its row is gone) and its retry, on this version, commits under
    the new name. A namespace property an earlier version wrote again after the move is
    dropped when the new name holds it already; a table under both names is an error naming it.
    """
    from pyiceberg.catalog.sql import IcebergNamespaceProperties, IcebergTables, SqlCatalog
    from sqlalchemy import delete, select, update
    from sqlalchemy.orm import Session

    old = legacy_catalog_name(config.name)
    if not isinstance(catalog, SqlCatalog) or old == catalog.name:
        return 0, 0
    with Session(catalog.engine) as session, session.begin():
        def keys(model: Any, *columns: Any, name: str) -> set[tuple[str, ...]]:
            return {tuple(r) for r in session.execute(select(*columns).where(model.catalog_name == name))}

        tables = IcebergTables.table_namespace, IcebergTables.table_name
        both = keys(IcebergTables, *tables, name=old) & keys(IcebergTables, *tables, name=catalog.name)
        if both:
            raise ConfigError(
                f"pipeline {config.name}: the SQL catalog holds tables under both its catalog name {catalog.name!r} and the "
                f"earlier {old!r}: {sorted('.'.join(t) for t in both)}; keep one of each (drop the other's row) and rerun"
            )
        props = IcebergNamespaceProperties.namespace, IcebergNamespaceProperties.property_key
        for namespace, key in keys(IcebergNamespaceProperties, *props, name=old) & keys(IcebergNamespaceProperties, *props,
                                                                                          name=catalog.name):
            session.execute(delete(IcebergNamespaceProperties).where(
                IcebergNamespaceProperties.catalog_name == old, IcebergNamespaceProperties.namespace == namespace,
                IcebergNamespaceProperties.property_key == key))
        if not keys(IcebergTables, *tables, name=old) and not keys(IcebergNamespaceProperties, *props, name=old):
            return 0, 0  # nothing to move: no write (a reader may hold read-only catalog credentials)
        rows_only = {"synchronize_session": False}  # no ORM objects are loaded: plain UPDATEs
        moved_tables = session.execute(update(IcebergTables).where(IcebergTables.catalog_name == old)
                                       .values(catalog_name=catalog.name), execution_options=rows_only).rowcount
        moved_props = session.execute(update(IcebergNamespaceProperties).where(IcebergNamespaceProperties.catalog_name == old)
                                      .values(catalog_name=catalog.name), execution_options=rows_only).rowcount
    return moved_tables, moved_props


def open_catalog(config: PipelineConfig) -> Catalog:
    properties = catalog_properties(config)
    key = (config.name, config.namespace, tuple(sorted(properties.items())))
    catalog = _CATALOGS.get(key)
    if catalog is None:
        catalog = load_catalog(catalog_name(config.name), **properties)
        _journal_to_wal(catalog)
        _guard_statements(catalog)
        migrate_catalog_name(catalog, config)  # before anything is created under the new name
        ensure_namespace(catalog, pipeline_namespace(config))
        migrate_identifiers(catalog, config)
        _CATALOGS[key] = catalog
    else:
        ensure_namespace(catalog, pipeline_namespace(config))
    return catalog


def _journal_to_wal(catalog: Catalog) -> None:
    """An SQLite catalog (the embedded default) journals to a write-ahead log: a commit is one
    append and one fsync of the log instead of a rollback journal's writes and fsyncs, and
    readers no longer wait for a writer. Measured: 13-24 ms per table commit with four threads
    committing where the rollback journal took 25-48 ms. Durability is unchanged (SQLite's
    ``synchronous`` stays FULL: every commit is on disk when it returns). The mode is kept in
    the database file, so every process opening it later uses it too; it needs a local file
    system, as SQLite does anyway."""
    engine = getattr(catalog, "engine", None)
    if engine is None or engine.dialect.name != "sqlite":
        return
    with engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA journal_mode=WAL")


def _guard_statements(catalog: Catalog) -> None:
    """A PostgreSQL catalog's statements are bounded on the client too: a server that stopped
    answering (frozen, its host gone without a reset) enforces no ``statement_timeout``, and libpq
    has no read timeout, so a statement still waiting ``CATALOG_STATEMENT_TIMEOUT`` +
    ``CATALOG_CLIENT_GRACE`` seconds after it was sent has its socket shut: the call fails
    (``psycopg2.OperationalError``, reported as the catalog's failure) instead of hanging the run."""
    engine = getattr(catalog, "engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        return
    import socket

    from sqlalchemy import event

    from spark.runtime.services import CATALOG_CLIENT_GRACE, CATALOG_STATEMENT_TIMEOUT

    def shut(dbapi_connection: Any) -> None:
        try:
            with socket.socket(fileno=os.dup(dbapi_connection.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError, AttributeError):
            pass

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        timer = threading.Timer(CATALOG_STATEMENT_TIMEOUT + CATALOG_CLIENT_GRACE, shut, (conn.connection.dbapi_connection,))
        timer.daemon = True
        conn.info.setdefault("tidelake_timers", []).append(timer)
        timer.start()

    def after(conn: Any, *_: Any) -> None:
        for timer in conn.info.pop("tidelake_timers", ()):
            timer.cancel()

    def failed(context: Any) -> None:
        if context.connection is not None:
            after(context.connection)

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    event.listen(engine, "handle_error", failed)


# -- fencing: the lease epoch, checked by the catalog's own transaction

FENCE_TABLE = "tidelake_lease_fence"


class CatalogFence:
    """The pipeline lease's epoch, kept in the SQL catalog's database and checked *inside* the
    transaction of every catalog write (``spark.archive.lease`` explains the lease).

    A run that takes the lease raises the pipeline's row to its epoch (``raise_to``); while it holds
    the lease every statement writing ``iceberg_tables`` (a commit: snapshots, tags, schema; a
    create, rename or drop) is preceded, in the same transaction, by

        UPDATE tidelake_lease_fence SET epoch = <mine> WHERE pipeline = <p> AND epoch <= <mine>

    which locks the row until the transaction ends. A run whose lease another run took since (a
    higher epoch in the row) updates nothing: its statement is not sent, the transaction rolls back
    and the run stops with ``LeaseLostError`` -- however long it was frozen between its last check
    and this write. A taker's ``raise_to`` waits for a commit in flight to end, so a commit is
    either before the takeover or refused. One holder per process and pipeline (the newest attached).
    """

    def __init__(self, catalog: Catalog, pipeline: str) -> None:
        from sqlalchemy import text

        self.engine, self.pipeline = catalog.engine, pipeline  # type: ignore[attr-defined]
        self._epoch: Any = None  # () -> int | None
        with self.engine.begin() as conn:
            conn.execute(text(f"CREATE TABLE IF NOT EXISTS {FENCE_TABLE} (pipeline VARCHAR(255) PRIMARY KEY, "
                              "epoch BIGINT NOT NULL)"))
        listeners = _FENCE_LISTENERS.setdefault(id(self.engine), {})
        if not listeners:
            _listen_for_writes(self.engine, listeners)
        self._listeners = listeners

    def raise_to(self, epoch: int) -> None:
        """Fence out every epoch below ``epoch``. Raises LeaseLostError if a higher one is there already."""
        from sqlalchemy import text

        from spark.archive.lease import LeaseLostError

        with self.engine.begin() as conn:
            conn.execute(text(f"INSERT INTO {FENCE_TABLE} (pipeline, epoch) VALUES (:p, 0) ON CONFLICT (pipeline) DO NOTHING"),
                         {"p": self.pipeline})
            done = conn.execute(text(f"UPDATE {FENCE_TABLE} SET epoch = :e WHERE pipeline = :p AND epoch <= :e"),
                                {"p": self.pipeline, "e": epoch}).rowcount
        if done != 1:
            raise LeaseLostError(f"pipeline {self.pipeline}: a run with a newer lease than epoch {epoch} has fenced the catalog")

    def attach(self, epoch: Any) -> None:
        """Check every catalog write against ``epoch()`` (None: not checked) until ``detach``."""
        self._epoch = epoch
        self._listeners[self.pipeline] = epoch

    def detach(self) -> None:
        if self._listeners.get(self.pipeline) is self._epoch:
            del self._listeners[self.pipeline]

    def epoch(self) -> int | None:
        """The fenced epoch in the catalog (None: never fenced)."""
        from sqlalchemy import text

        with self.engine.connect() as conn:
            return conn.execute(text(f"SELECT epoch FROM {FENCE_TABLE} WHERE pipeline = :p"), {"p": self.pipeline}).scalar()


_FENCE_LISTENERS: dict[int, dict[str, Any]] = {}


def _listen_for_writes(engine: Any, listeners: dict[str, Any]) -> None:
    from sqlalchemy import event

    from spark.archive.lease import LeaseLostError

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if not listeners:
            return
        head = statement.lstrip()[:12].upper()
        if not head.startswith(("UPDATE", "INSERT", "DELETE")) or "iceberg_tables" not in statement or FENCE_TABLE in statement:
            return
        for pipeline, epoch_of in list(listeners.items()):
            epoch = epoch_of()
            if epoch is None:
                continue
            mark = "?" if context.dialect.paramstyle == "qmark" else "%s"
            fence = conn.connection.dbapi_connection.cursor()
            try:
                fence.execute(f"UPDATE {FENCE_TABLE} SET epoch = {mark} WHERE pipeline = {mark} AND epoch <= {mark}",
                              (epoch, pipeline, epoch))
                if fence.rowcount != 1:
                    raise LeaseLostError(
                        f"pipeline {pipeline}: another run took the lease from this run (epoch {epoch}) and fenced the "
                        "catalog; this run stops without writing (it was paused or cut off past its lease)")
            finally:
                fence.close()

    def pause_point(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        # Tests pause a run here (spark.runtime.faults): after its last lease check, before its catalog
        # write -- and before the write's client-side timer starts (``_guard_statements``).
        if listeners and statement.lstrip()[:6].upper() in ("UPDATE", "INSERT", "DELETE") and "iceberg_tables" in statement:
            from spark.runtime import faults

            faults.at("catalog-write")

    event.listen(engine, "before_cursor_execute", pause_point, insert=True)
    event.listen(engine, "before_cursor_execute", before)  # after the statement's timer: the fence is bounded too


def catalog_fence(catalog: Catalog, pipeline: str) -> CatalogFence | None:
    """The pipeline's ``CatalogFence`` in a SQL catalog; None for catalogs without a database of theirs (REST)."""
    if getattr(catalog, "engine", None) is None:
        return None
    return CatalogFence(catalog, pipeline)


def close_catalogs() -> None:
    """Forget this process's open catalogs: the next ``open_catalog`` starts afresh, as a new process would."""
    _CATALOGS.clear()


# Tables of one run are created from several threads (spark.commit.apply commits tables side by side):
# namespaces are made under a lock, since a SQL catalog reports a concurrent create as a
# constraint violation rather than NamespaceAlreadyExistsError.
_NAMESPACE_LOCK = threading.Lock()


def ensure_namespace(catalog: Catalog, namespace: tuple[str, ...]) -> None:
    try:
        catalog.load_namespace_properties(namespace)  # a read; a failed create costs a rolled-back write
        return
    except NoSuchNamespaceError:
        pass
    with _NAMESPACE_LOCK:
        try:
            catalog.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass


_IDENTIFIER_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
_EMPTY = "%00empty"  # no upstream database allows an empty name or NUL; kept as layout spells it


def identifier_part(name: str) -> str:
    """An upstream database or table name as one lowercase, dot-free Iceberg identifier part."""
    if not name:
        return _EMPTY
    return "".join(c if c in _IDENTIFIER_SAFE else "".join(f"%{b:02x}" for b in c.encode()) for c in name)


def identifier_name(part: str) -> str:
    """The upstream name an ``identifier_part`` encodes."""
    return "" if part == _EMPTY else unquote(part, errors="strict")


def pipeline_namespace(config: PipelineConfig) -> tuple[str, ...]:
    return Catalog.identifier_to_tuple(config.namespace)


def database_namespace(config: PipelineConfig, database: str) -> tuple[str, ...]:
    return (*pipeline_namespace(config), identifier_part(database))


def identifier(config: PipelineConfig, database: str, table: str) -> tuple[str, ...]:
    return (*database_namespace(config, database), identifier_part(table))


def migrate_identifiers(catalog: Catalog, config: PipelineConfig) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Move tables named the old way, ``(<pipeline namespace>, "<enc db>.<enc table>")``, to ``identifier``.

    Idempotent and safe to race: a table another process already moved is skipped. The
    table's files, UUID, snapshots and tags stay as they are; only its catalog entry moves.
    Returns the (old, new) identifiers this call moved.
    """
    moved = []
    for old in sorted(catalog.list_tables(pipeline_namespace(config))):
        try:
            props: dict[str, Any] = catalog.load_table(old).properties
        except NoSuchTableError:
            continue  # moved by a concurrent open
        if props.get(PIPELINE) != config.name or UPSTREAM_DATABASE not in props:
            continue  # not a tidelake table of this pipeline: leave it where its owner put it
        new = identifier(config, props[UPSTREAM_DATABASE], props[UPSTREAM_TABLE])
        ensure_namespace(catalog, new[:-1])
        try:
            catalog.rename_table(old, new)
        except (NoSuchTableError, TableAlreadyExistsError):
            continue  # a concurrent open moved it first
        moved.append((tuple(old), new))
    return moved


def rename_table(catalog: Catalog, table: Table, new: tuple[str, ...]) -> Table:
    """``catalog.rename_table`` into a database namespace that may not exist yet (RENAME TABLE a.t TO b.t)."""
    ensure_namespace(catalog, new[:-1])
    return catalog.rename_table(table.name(), new)


def released_identifier(config: PipelineConfig, database: str, table: str, uuid: str) -> tuple[str, ...]:
    """Where a dropped table of upstream ``database.table`` goes when its name is taken: ``identifier_part``
    writes ``%00`` only as the whole empty name's part, so no upstream table is ever named here."""
    return (*database_namespace(config, database), f"{identifier_part(table)}%00{uuid}")


def release_name(catalog: Catalog, config: PipelineConfig, table: Table) -> Table:
    """Move a dropped table aside so its name can be taken (RENAME TABLE onto a dropped table's name)."""
    database, name = upstream_name(table)
    return catalog.rename_table(table.name(), released_identifier(config, database, name, str(table.metadata.table_uuid)))


def table_location(catalog: Catalog, config: PipelineConfig, database: str, table: str) -> str:
    warehouse = str(catalog.properties.get("warehouse", "")).rstrip("/")
    return f"{warehouse}/{layout.encode_name(config.namespace)}/{layout.encode_name(database)}/{layout.encode_name(table)}"


def load_table(catalog: Catalog, config: PipelineConfig, database: str, table: str) -> Table | None:
    try:
        return catalog.load_table(identifier(config, database, table))
    except NoSuchTableError:
        return None


def create_table(catalog: Catalog, config: PipelineConfig, database: str, table: str, schema: Schema, keys: tuple[str, ...],
                 buckets: int | None = None, properties: dict[str, str] | None = None) -> Table:
    """Create the Iceberg table for upstream ``database.table``, laid out by ``[layout]`` (or ``buckets``),
    with ``properties`` besides tidelake's own; ``schema`` is an ``iceberg_schema`` (its metadata columns
    last, recorded in the table's properties).

    Raises:
        LayoutUnavailable: a bucketed layout without pyiceberg-core; nothing is created.
    """
    partition_spec, sort_order = table_layout(schema, keys, config.layout.buckets if buckets is None else buckets)
    ensure_namespace(catalog, database_namespace(config, database))
    return catalog.create_table(
        identifier(config, database, table),
        schema=schema,
        location=table_location(catalog, config, database, table),
        partition_spec=partition_spec,
        sort_order=sort_order,
        properties={
            UPSTREAM_DATABASE: database,
            UPSTREAM_TABLE: table,
            KEY_COLUMNS: json.dumps(list(keys)),
            PIPELINE: config.name,
            "format-version": "2",
            **metadata_property(schema),
            **(properties or {}),
        },
    )


def pipeline_identifiers(catalog: Catalog, config: PipelineConfig) -> list[tuple[str, ...]]:
    """The identifiers of every table of the pipeline (a listing of each database namespace), sorted."""
    return sorted(tuple(i) for ns in catalog.list_namespaces(pipeline_namespace(config)) for i in catalog.list_tables(ns))


def pipeline_tables(catalog: Catalog, config: PipelineConfig) -> list[Table]:
    """Every table of the pipeline: the tables of each database namespace under the pipeline namespace."""
    return [catalog.load_table(i) for i in pipeline_identifiers(catalog, config)]


class RunTables:
    """The pipeline's tables as one run sees them: each listed and loaded once, then kept current
    by the run's own commits.

    Loading a table is a catalog query and a parse of its metadata file (growing with its
    snapshots and tags); a run over a thousand tables read every table five times or more
    (the walk, the ahead check, the tag loop, the published view, each plan's commit). A run
    holds the pipeline's lease, so nothing else writes its tables meanwhile, and a commit
    through a ``Table`` (pyiceberg ``Transaction.commit_transaction``) replaces that object's
    metadata with the committed one: every write of the run goes through the ``Table``s handed
    out here, so they stay current. A table made by the run is ``add``-ed; a rename, or a name
    released, is ``moved``: the tables are listed and loaded again. Thread-safe (the run
    commits tables side by side)."""

    def __init__(self, catalog: Catalog, config: PipelineConfig) -> None:
        self.catalog, self.config = catalog, config
        self._lock = threading.Lock()
        self._loaded: dict[tuple[str, ...], Table] = {}
        self._listed: list[tuple[str, ...]] | None = None

    def all(self) -> list[Table]:
        """Every table of the pipeline, in identifier order (``pipeline_tables``)."""
        with self._lock:
            if self._listed is None:
                self._listed = pipeline_identifiers(self.catalog, self.config)
            listed = self._listed
        return [t for t in (self._get(i) for i in listed) if t is not None]

    def load(self, database: str, table: str) -> Table | None:
        """The table of upstream ``database.table`` (``load_table``); None if the catalog has none."""
        return self._get(identifier(self.config, database, table))

    def _get(self, ident: tuple[str, ...]) -> Table | None:
        with self._lock:
            found = self._loaded.get(ident)
        if found is not None:
            return found
        try:
            table = self.catalog.load_table(ident)
        except NoSuchTableError:
            return None
        with self._lock:
            return self._loaded.setdefault(ident, table)

    def add(self, table: Table) -> Table:
        """A table the run made: listed from now on."""
        with self._lock:
            self._loaded[tuple(table.name())] = table
            self._listed = None
        return table

    def moved(self) -> None:
        """The run renamed a table (or moved a dropped one aside): names hold other tables now."""
        with self._lock:
            self._loaded.clear()
            self._listed = None


def upstream_name(table: Table) -> tuple[str, str]:
    props: dict[str, Any] = table.properties
    return props[UPSTREAM_DATABASE], props[UPSTREAM_TABLE]


def table_label(table: Table) -> str:
    """How runs and reports name a table, one name per table: ``db.table``, and for a dropped table
    whose name a rename took (``release_name``) ``db.table (dropped, <uuid>)``: the new one has the name."""
    database, name = upstream_name(table)
    uuid = str(table.metadata.table_uuid)
    if table.name()[-1] != f"{identifier_part(name)}%00{uuid}":
        return f"{database}.{name}"
    return f"{database}.{name} (dropped, {uuid})"
