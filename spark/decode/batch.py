"""Column-wise decode of TiCDC Canal-JSON row messages into change-log rows.

The per-change path (decoder -> ``RowChange`` -> key effects -> ``image_encoder`` -> a tuple
per row) spends ~11 us a message in Python objects that live for one row: 5x the cost of
parsing the message. Here each message is parsed once with ``orjson`` and checked for the
common shape -- one row (TiCDC), ``_tidb`` holding only ``commitTs``, the table's last
``mysqlType`` and ``pkNames``, every column of a kind below -- and the rows of a read batch
become the change log's columns at once, with Arrow compute and numpy: each column's values
are checked and MessagePack-encoded as one array, an image is the row-wise join of its
columns' encodings, the key bytes likewise.

Exactness: the bytes are those of the per-change path by construction -- each kind's fast
case accepts only text whose typed value (``cdc_codecs.rowconv``'s compiled converter) and
whose stored form (``spark.decode.effect``) it can spell without Python's conversion, e.g. a
decimal whose ``str(Decimal(text))`` is the text itself. Every other message -- a watermark,
DDL, several rows, a claim-check, an unusual value, a type without a fast case (float,
time, enum, bit, ...), a key-less table, anything invalid -- takes the per-change path, in
its place in offset order, and so does a whole batch on any surprise (an exception here is
never an error of the message). tests/spark/decode/test_batch.py holds the two paths to the
same change-log bytes, side outputs and errors, over every protocol, every MySQL type at its
extremes and the fuzzer's mutations.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from cdc_codecs.canal_json import CanalJsonDecoder
from cdc_codecs.types import UTC, ColumnType, TypeKind, int_range
from spark.fold.net_change import table_seed

_OPS = {"INSERT": 0, "UPDATE": 1, "DELETE": 2}
INSERT, UPDATE, DELETE = 0, 1, 2
_OP_TEXT = (b"\xa6insert", b"\xa6update", b"\xa6delete")  # fixstr of ``Op``'s value, as msgspec writes it
_NIL = b"\xc0"
_SIGNED_INTS = frozenset({TypeKind.INT, TypeKind.LONG})
_FAST_KINDS = frozenset({TypeKind.STRING, TypeKind.JSON, TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG,
                         TypeKind.DECIMAL, TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ, TypeKind.DATE, TypeKind.BINARY})
_KEY_KINDS = frozenset({TypeKind.STRING, TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG})

# Text whose Python value the fast case spells exactly (anything else: the per-change path).
_INT_TEXT = r"^-?[0-9]{1,20}$"  # int() also takes '+', spaces, '_', other digits: not here
# str(Decimal(t)) == t: no sign but '-', no leading zero, no exponent; and a plain (not scientific)
# str, which needs the adjusted exponent >= -6: below 1, at most five zeros after the point.
_DECIMAL_TEXT = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$"
_DECIMAL_SMALL = r"^-?0\.0{6}"
_DATETIME_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?$"
_DATE_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_U64_MAX_TEXT = "18446744073709551615"
_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


def _msgpack_str(text: bytes) -> bytes:
    n = len(text)
    head = bytes([0xA0 | n]) if n < 32 else b"\xd9" + bytes([n]) if n < 256 else b"\xda" + n.to_bytes(2, "big") \
        if n < 65536 else b"\xdb" + n.to_bytes(4, "big")
    return head + text


def _map_header(n: int) -> bytes:
    return bytes([0x80 | n]) if n < 16 else b"\xde" + n.to_bytes(2, "big")


def _binary(matrix: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Row i: the first ``lengths[i]`` bytes of ``matrix[i]``, as a binary array."""
    n, width = matrix.shape
    data = matrix[np.arange(width) < lengths[:, None]]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _headed(head: np.ndarray, head_lengths: np.ndarray, body: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(_binary(head, head_lengths), body.cast(pa.binary()), b"")


def _length_head(lengths: np.ndarray, small: int | None, codes: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """MessagePack's length prefix: ``small | n`` under 32 (str; None: no such form), else a
    code and a 1-, 2- or 4-byte big-endian length."""
    n = len(lengths)
    head = np.zeros((n, 5), np.uint8)
    width = np.where(lengths < 256, 2, np.where(lengths < 65536, 3, 5))
    if small is not None:
        width = np.where(lengths < 32, 1, width)
    be = lengths.astype(">u4").view(np.uint8).reshape(n, 4)
    head[:, 0] = np.where(width == 1, small or 0, np.where(width == 2, codes[0], np.where(width == 3, codes[1], codes[2])))
    head[:, 0] |= np.where(width == 1, lengths, 0).astype(np.uint8)
    head[width == 2, 1] = be[width == 2, 3]
    head[width == 3, 1:3] = be[width == 3, 2:4]
    head[width == 5, 1:5] = be[width == 5]
    return head, width


def _lengths(a: pa.Array) -> np.ndarray:
    return pc.binary_length(a).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


class Column:
    """One column's values of a batch (texts, None for NULL): which are fast, their MessagePack
    bytes, and for a key column the key bytes' part."""

    def __init__(self, ct: ColumnType, values: list[Any], key: bool) -> None:
        try:
            texts = pa.array(values, pa.string())
            ok = np.ones(len(values), bool)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a number, object, ... : the per-change path
            ok = np.fromiter((v is None or type(v) is str for v in values), bool, len(values))
            texts = pa.array([v if good else None for v, good in zip(values, ok)], pa.string())
        self.null = texts.is_null().to_numpy(zero_copy_only=False)
        kind = ct.kind
        if kind is TypeKind.STRING or kind is TypeKind.JSON:
            head, width = _length_head(_lengths(texts), 0xA0, (0xD9, 0xDA, 0xDB))
            encoded = _headed(head, width, texts)
        elif kind in _SIGNED_INTS or kind is TypeKind.UNSIGNED_LONG:
            ok, encoded = self._int(ct, texts, ok)
        elif kind is TypeKind.DECIMAL:
            good = pc.and_(pc.match_substring_regex(texts, _DECIMAL_TEXT),
                           pc.invert(pc.match_substring_regex(texts, _DECIMAL_SMALL)))
            ok &= good.fill_null(True).to_numpy(zero_copy_only=False)
            encoded = self._ext(1, texts)
        elif kind is TypeKind.TIMESTAMP or kind is TypeKind.TIMESTAMPTZ:
            ok, encoded = self._datetime(texts, ok, 2 if kind is TypeKind.TIMESTAMP else 3)
        elif kind is TypeKind.DATE:
            ok, encoded = self._date(texts, ok)
        elif kind is TypeKind.BINARY:
            ok, encoded = self._latin1(texts, ok)
        else:  # pragma: no cover - plans hold only _FAST_KINDS
            raise AssertionError(kind)
        self.ok = ok
        self.encoded = encoded.fill_null(_NIL)
        if key:
            self.key = self._key_part(kind, texts)

    def _int(self, ct: ColumnType, texts: pa.Array, ok: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        lo, hi = int_range(ct)
        good = pc.match_substring_regex(texts, _INT_TEXT).fill_null(True).to_numpy(zero_copy_only=False)
        negative = pc.starts_with(texts, "-").fill_null(False).to_numpy(zero_copy_only=False)
        digits = pc.if_else(pa.array(negative), pc.utf8_slice_codeunits(texts, 1), texts) if negative.any() else texts
        digits = pc.if_else(pa.array(good), digits, "0").fill_null("0")
        # 20 digits may pass 2**64 - 1: compared as text (equal lengths compare as numbers).
        too_big = pc.and_(pc.equal(pc.utf8_length(digits), 20), pc.greater(digits, _U64_MAX_TEXT))
        good &= ~too_big.to_numpy(zero_copy_only=False)
        magnitude = pc.if_else(pa.array(good), digits, "0").cast(pa.uint64()).to_numpy()
        good &= np.where(negative, magnitude <= np.uint64(-lo), magnitude <= np.uint64(hi))
        ok = ok & (good | self.null)
        self.magnitude, self.negative = magnitude, negative & (magnitude > 0)
        value = np.where(self.negative, np.negative(magnitude), magnitude)  # two's complement as uint64
        be = value.astype(">u8").view(np.uint8).reshape(len(value), 8)
        n = len(value)
        matrix = np.zeros((n, 9), np.uint8)
        width = np.zeros(n, np.int64)
        signed = value.view(np.int64)
        classes = [  # (rows, code, value bytes); msgspec's smallest form
            (~self.negative & (magnitude < 128), None, 0),
            (~self.negative & (magnitude >= 128) & (magnitude < 256), 0xCC, 1),
            (~self.negative & (magnitude >= 256) & (magnitude < 65536), 0xCD, 2),
            (~self.negative & (magnitude >= 65536) & (magnitude < 1 << 32), 0xCE, 4),
            (~self.negative & (magnitude >= 1 << 32), 0xCF, 8),
            (self.negative & (signed >= -32), None, 0),
            (self.negative & (signed < -32) & (signed >= -128), 0xD0, 1),
            (self.negative & (signed < -128) & (signed >= -32768), 0xD1, 2),
            (self.negative & (signed < -32768) & (signed >= -(1 << 31)), 0xD2, 4),
            (self.negative & (signed < -(1 << 31)), 0xD3, 8),
        ]
        for rows, code, size in classes:
            if code is None:  # a fixint: the value's low byte
                matrix[rows, 0] = be[rows, 7]
                width[rows] = 1
            else:
                matrix[rows, 0] = code
                matrix[rows, 1:1 + size] = be[rows, 8 - size:]
                width[rows] = 1 + size
        encoded = _binary(matrix, width)
        return ok, pc.if_else(pa.array(self.null), pa.scalar(None, pa.binary()), encoded)

    @staticmethod
    def _ext(code: int, texts: pa.Array) -> pa.Array:
        """``Ext(code, text)``: fixext for 1, 2, 4, 8 and 16 bytes, else ext 8/16/32."""
        lengths = _lengths(texts)
        n = len(lengths)
        head, width = _length_head(lengths, None, (0xC7, 0xC8, 0xC9))
        fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
        for size, fix in fixed.items():
            rows = lengths == size
            head[rows, 0] = fix
            width[rows] = 1
        out = np.zeros((n, 6), np.uint8)
        out[:, :5] = head
        out[np.arange(n), width] = code
        return _headed(out, width + 1, texts)

    def _fields(self, texts: pa.Array, ok: np.ndarray, pattern: str, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``texts`` matching ``pattern``, and their first ``size`` characters as digits."""
        good = pc.match_substring_regex(texts, pattern).fill_null(False).to_numpy(zero_copy_only=False)
        lengths = _lengths(texts)
        offsets = np.frombuffer(texts.buffers()[1], np.int32, len(texts) + 1, texts.offset * 4)
        data = np.frombuffer(texts.buffers()[2], np.uint8) if texts.buffers()[2] is not None else np.zeros(0, np.uint8)
        index = offsets[:-1, None] + np.arange(size)
        index = np.where(good[:, None], index, 0)
        chars = data[np.minimum(index, max(len(data) - 1, 0))] if len(data) else np.zeros((len(texts), size), np.uint8)
        chars = np.where(np.arange(size) < lengths[:, None], chars, ord("0")).astype(np.int64) - ord("0")
        return good, chars

    @staticmethod
    def _date_ok(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
        leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
        good_month = (month >= 1) & (month <= 12)
        days = _DAYS[np.where(good_month, month, 0)] + (leap & (month == 2))
        return (year >= 1) & good_month & (day >= 1) & (day <= days)

    def _datetime(self, texts: pa.Array, ok: np.ndarray, code: int) -> tuple[np.ndarray, pa.Array]:
        good, d = self._fields(texts, ok, _DATETIME_TEXT, 26)
        year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
        month, day = d[:, 5] * 10 + d[:, 6], d[:, 8] * 10 + d[:, 9]
        hour, minute, second = d[:, 11] * 10 + d[:, 12], d[:, 14] * 10 + d[:, 15], d[:, 17] * 10 + d[:, 18]
        micro = (d[:, 20:26] * np.array([100000, 10000, 1000, 100, 10, 1])).sum(axis=1)
        good &= self._date_ok(year, month, day) & (hour <= 23) & (minute <= 59) & (second <= 59)
        n = len(year)
        matrix = np.zeros((n, 14), np.uint8)
        matrix[:, 0], matrix[:, 1], matrix[:, 2] = 0xC7, 11, code
        matrix[:, 3:5] = year.astype("<u2").view(np.uint8).reshape(n, 2)
        for i, part in enumerate((month, day, hour, minute, second)):
            matrix[:, 5 + i] = part
        matrix[:, 10:14] = micro.astype("<u4").view(np.uint8).reshape(n, 4)
        encoded = _binary(matrix, np.full(n, 14, np.int64))
        return ok & (good | self.null), pc.if_else(pa.array(self.null), pa.scalar(None, pa.binary()), encoded)

    def _date(self, texts: pa.Array, ok: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        good, d = self._fields(texts, ok, _DATE_TEXT, 10)
        year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
        month, day = d[:, 5] * 10 + d[:, 6], d[:, 8] * 10 + d[:, 9]
        good &= self._date_ok(year, month, day)
        n = len(year)
        matrix = np.zeros((n, 6), np.uint8)
        matrix[:, 0], matrix[:, 1] = 0xD6, 4
        matrix[:, 2:4] = year.astype("<u2").view(np.uint8).reshape(n, 2)
        matrix[:, 4], matrix[:, 5] = month, day
        encoded = _binary(matrix, np.full(n, 6, np.int64))
        return ok & (good | self.null), pc.if_else(pa.array(self.null), pa.scalar(None, pa.binary()), encoded)

    def _latin1(self, texts: pa.Array, ok: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        """Canal's bytes: one ISO-8859-1 character per byte -- U+0080..U+00FF are the UTF-8 pairs
        C2 xx and C3 xx; any character above U+00FF is not a byte (the per-change path errs)."""
        n = len(texts)
        offsets = np.frombuffer(texts.buffers()[1], np.int32, n + 1, texts.offset * 4).astype(np.int64)
        buffer = texts.buffers()[2]
        data = np.frombuffer(buffer, np.uint8)[offsets[0]:offsets[-1]] if buffer is not None else np.zeros(0, np.uint8)
        offsets = offsets - offsets[0]
        row = np.repeat(np.arange(n), np.diff(offsets))
        bad = np.zeros(n, bool)
        np.logical_or.at(bad, row[data >= 0xC4], True)
        lead = (data == 0xC2) | (data == 0xC3)
        out = data.copy()
        follows = np.flatnonzero(data == 0xC3) + 1
        out[follows] = out[follows] + 0x40
        keep = ~lead
        lengths = np.bincount(row[keep], minlength=n).astype(np.int64) if len(row) else np.zeros(n, np.int64)
        new_offsets = np.zeros(n + 1, np.int32)
        np.cumsum(lengths, out=new_offsets[1:])
        body = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(new_offsets), pa.py_buffer(out[keep])])
        head, width = _length_head(lengths, None, (0xC4, 0xC5, 0xC6))
        encoded = pc.binary_join_element_wise(_binary(head, width), body, b"")
        return ok & ~bad, pc.if_else(pa.array(self.null), pa.scalar(None, pa.binary()), encoded)

    def _key_part(self, kind: TypeKind, texts: pa.Array) -> pa.Array:
        """``f"{len(t)}:{t}"`` of ``net_change._canonical``'s text t: ``s`` + the string, ``n`` + the
        integer's digits, ``0`` for NULL."""
        if kind is TypeKind.STRING:
            tagged = pc.binary_join_element_wise("s", texts, "")
            size = pc.add(pc.utf8_length(texts), 1)
        else:
            digits = pc.cast(pa.array(self.magnitude), pa.string())
            tagged = pc.if_else(pa.array(self.negative), pc.binary_join_element_wise("n-", digits, ""),
                                pc.binary_join_element_wise("n", digits, ""))
            size = pc.utf8_length(tagged)
        part = pc.binary_join_element_wise(pc.cast(size, pa.string()), ":", tagged, "")
        return pc.if_else(pa.array(self.null), "1:0", part).cast(pa.binary())


class Plan:
    """What the fast path needs of one table schema (column types and key columns)."""

    def __init__(self, types: Mapping[str, ColumnType], keys: tuple[str, ...], schema: int) -> None:
        self.types, self.keys, self.schema = types, keys, schema
        self.names = tuple(types)
        self.name_bytes = [_msgspec_name(n) for n in self.names]
        self.map_header = _map_header(len(self.names))
        self.key_map_header = _map_header(len(keys))


def _msgspec_name(name: str) -> bytes:
    return _msgpack_str(name.encode("utf-8"))


def plan_for(types: Mapping[str, ColumnType] | None, keys: tuple[str, ...], schema: int) -> Plan | None:
    """A plan when every column has a fast case and the key is one the fast path spells."""
    if not types or not keys or len(set(keys)) != len(keys):
        return None
    if any(ct.kind not in _FAST_KINDS for ct in types.values()):
        return None
    if any(k not in types or types[k].kind not in _KEY_KINDS for k in keys):
        return None
    return Plan(types, keys, schema)


class CanalBatch:
    """The fast path of one segment's decode: ``split`` a read batch into change-log rows of its
    common messages (an Arrow table in offset order, each row naming its message) and the
    messages left for the per-change path."""

    def __init__(self, decoder: CanalJsonDecoder, topic: str, partition: int, schema_of: Any) -> None:
        self.decoder = decoder
        self.topic, self.partition = topic, partition
        self.schema_of = schema_of  # (key columns, column types) -> schema_id, noted in the side output
        self._tables: dict[tuple[str, str], tuple[dict[str, Any], Any, Plan | None]] = {}
        self._plans: dict[tuple[Any, ...], Plan | None] = {}

    @staticmethod
    def applies(decoder: Any, commit_ts_clock: bool) -> bool:
        """TiCDC's Canal-JSON ordered by its commitTs (the TiDB extension), TIMESTAMP in UTC."""
        return (type(decoder) is CanalJsonDecoder and commit_ts_clock and decoder.carries_commit_ts
                and decoder.options["timezone"] is UTC)

    def _plan(self, database: str, table: str, mysql_type: Any, pk_names: Any) -> Plan | None:
        decoder = self.decoder
        try:
            types, _ = decoder._schema(database, table, mysql_type)
            keys = decoder._key_columns(pk_names)
        except Exception:  # noqa: BLE001 - the per-change path raises the message's error
            return None
        # Only a compiled converter (cached by the decoder) yields rows in the types' order.
        if tuple(mysql_type.items()) not in decoder._converters:
            return None
        ident = (id(types), keys)
        if ident not in self._plans:
            if len(self._plans) >= 1024:
                self._plans.clear()
            self._plans[ident] = plan_for(types, keys, self.schema_of(keys, types))
        plan = self._plans[ident]
        if len(self._tables) < 1024:
            self._tables[(database, table)] = (dict(mysql_type), list(pk_names), plan)
        return plan

    def split(self, offsets: np.ndarray, values: list[Any], times: dict[str, float] | None = None,
              ) -> tuple[pa.Table | None, np.ndarray, np.ndarray]:
        """(change-log rows of the fast messages in offset order or None, each row's message index
        in the batch, which messages are fast)."""
        clock = time.process_time if times is not None else None
        started = clock() if clock else 0.0
        loads, ops, tables = orjson.loads, _OPS, self._tables
        groups: dict[int, tuple[Plan, list[Any]]] = {}
        fast = np.zeros(len(values), bool)
        for i, value in enumerate(values):
            try:
                doc = loads(value)
            except (orjson.JSONDecodeError, TypeError):
                continue
            if type(doc) is not dict:
                continue
            get = doc.get
            tidb = get("_tidb")
            if type(tidb) is not dict or len(tidb) != 1:
                continue
            ts = tidb.get("commitTs")
            if type(ts) is not int or not 0 <= ts < 1 << 63 or get("isDdl") is not False:
                continue
            kind = get("type")
            if type(kind) is not str:
                continue
            op = ops.get(kind)
            database, table, es, data, old = get("database"), get("table"), get("es"), get("data"), get("old")
            if (op is None or type(database) is not str or type(table) is not str or (es is not None and type(es) is not int)
                    or type(data) is not list or len(data) != 1 or type(data[0]) is not dict):
                continue
            if op == UPDATE:
                if type(old) is not list or len(old) != 1 or type(old[0]) is not dict:
                    continue
            elif old is not None and type(old) is not list:
                continue
            mysql_type, pk_names = get("mysqlType"), get("pkNames")
            if type(mysql_type) is not dict or type(pk_names) is not list:
                continue
            entry = tables.get((database, table))
            if entry is not None and entry[0] == mysql_type and entry[1] == pk_names:
                plan = entry[2]
            else:
                plan = self._plan(database, table, mysql_type, pk_names)
            if plan is None:
                continue
            row = data[0]
            if len(row) != len(plan.names) or (op == UPDATE and len(old[0]) != len(plan.names)):
                continue
            group = groups.get(id(plan))
            if group is None:
                group = groups[id(plan)] = (plan, [])
            group[1].append((i, op, ts, database, table, row, old[0] if op == UPDATE else None))
            fast[i] = True
        if clock:
            now = clock()
            times["parse + check"] = times.get("parse + check", 0.0) + now - started
            started = now
        parts = []
        for plan, rows in groups.values():
            part, good = self._columns(plan, rows, offsets)
            if not good.all():
                fast[np.array([r[0] for r, g in zip(rows, good) if not g], np.int64)] = False
            if part is not None:
                parts.append(part)
        if clock:
            now = clock()
            times["columns, images, keys"] = times.get("columns, images, keys", 0.0) + now - started
        if not parts:
            return None, np.zeros(0, np.int64), fast
        table = pa.concat_tables(parts)
        order = np.argsort(table.column("_order").to_numpy(), kind="stable")
        table = table.take(order)
        message = table.column("_message").to_numpy()
        return table.drop_columns(["_order", "_message"]), message, fast

    def _columns(self, plan: Plan, rows: list[Any], offsets: np.ndarray) -> tuple[pa.Table | None, np.ndarray]:
        """The change-log rows of one schema's fast messages, and which messages were fast after all."""
        n = len(rows)
        message = np.fromiter((r[0] for r in rows), np.int64, n)
        op = np.fromiter((r[1] for r in rows), np.int8, n)
        updates = np.flatnonzero(op == UPDATE)
        olds = [rows[j][6] for j in updates]
        good = np.ones(n, bool)
        columns: dict[str, Column] = {}
        for name in plan.names:
            try:
                values = [r[5][name] for r in rows] + [o[name] for o in olds]
            except KeyError:  # a row of as many columns but another name: the per-change path
                values = []
                for j, r in enumerate(rows):
                    values.append(r[5].get(name))
                    good[j] &= name in r[5]
                for j, o in zip(updates, olds):
                    values.append(o.get(name))
                    good[j] &= name in o
            column = columns[name] = Column(plan.types[name], values, name in plan.keys)
            good &= column.ok[:n]
            good[updates] &= column.ok[n:]
        keep = np.flatnonzero(good)
        if not len(keep):
            return None, good
        # The new image's ``change`` (insert/update) and the data's and the old row's keys.
        m = len(updates)
        new_index = pa.array(keep)
        old_at = np.full(n, -1, np.int64)
        old_at[updates] = n + np.arange(m)
        old_index = pa.array(old_at[keep])  # -1 for rows without an old image: taken, never used
        old_index = pc.if_else(pc.less(old_index, 0), 0, old_index)
        op_keep = op[keep]
        count = len(keep)
        names = plan.names
        pieces: list[Any] = [pa.array([b"\x92" + _OP_TEXT[o] + plan.map_header for o in (INSERT, UPDATE)], pa.binary())
                             .take(pa.array((op_keep == UPDATE).astype(np.int8)))]
        for name, name_bytes in zip(names, plan.name_bytes):
            pieces += [name_bytes, columns[name].encoded.take(new_index)]
        image = pc.binary_join_element_wise(*pieces, b"")

        def key_and_delete_image(index: pa.Array) -> tuple[pa.Array, pa.Array]:
            key_parts, image_parts = [], [b"\x92" + _OP_TEXT[DELETE] + plan.key_map_header]
            for k in plan.keys:
                key_parts.append(columns[k].key.take(index))
                image_parts += [_msgspec_name(k), columns[k].encoded.take(index)]
            key = key_parts[0] if len(key_parts) == 1 else pc.binary_join_element_wise(*key_parts, b"")
            return key, pc.binary_join_element_wise(*image_parts, b"")

        new_key, new_delete = key_and_delete_image(new_index)
        old_key, old_delete = key_and_delete_image(old_index)
        is_update = op_keep == UPDATE
        moved = is_update & ~np.asarray(pc.equal(new_key, old_key).to_numpy(zero_copy_only=False), bool)
        first_deletes = (op_keep == DELETE) | moved
        first_key = pc.if_else(pa.array(moved), old_key, new_key)
        first_change = pc.if_else(pa.array(op_keep == DELETE), new_delete, pc.if_else(pa.array(moved), old_delete, image))
        second = np.flatnonzero(moved)
        second_index = pa.array(second)
        key = pa.concat_arrays([first_key, new_key.take(second_index)])
        change = pa.concat_arrays([first_change, image.take(second_index)])
        deletes = np.concatenate([first_deletes, np.zeros(len(second), bool)])
        first = np.concatenate([np.ones(count, bool), np.zeros(len(second), bool)])
        source = np.concatenate([np.arange(count), second])
        kept_rows = [rows[j] for j in keep]
        at = message[keep][source]
        databases = [kept_rows[j][3] for j in source]
        tables = [kept_rows[j][4] for j in source]
        seed = {name: table_seed(*name) for name in set(zip(databases, tables))}
        seeds = [seed[name] for name in zip(databases, tables)]
        crc = zlib.crc32
        key_hash = [crc(k, s) for k, s in zip(key.to_pylist(), seeds)]
        total = len(source)
        commit_ts = np.fromiter((r[2] for r in kept_rows), np.int64, count)[source]
        table = pa.Table.from_arrays([
            pa.repeat(pa.scalar(self.topic, pa.string()), total),
            pa.repeat(pa.scalar(self.partition, pa.int32()), total),
            pa.array(offsets[at], pa.int64()),
            pa.repeat(pa.scalar(0, pa.int32()), total),
            pa.array(commit_ts, pa.int64()),
            pa.array(databases, pa.string()),
            pa.array(tables, pa.string()),
            key,
            pa.array(deletes),
            pa.array(first),
            change,
            pa.repeat(pa.scalar(plan.schema, pa.int64()), total),
            pa.array(key_hash, pa.int64()),
            pa.repeat(pa.scalar(-1, pa.int64()), total),
            pa.array(at * 2 + np.concatenate([np.zeros(count, np.int64), np.ones(len(second), np.int64)])),
            pa.array(at),
        ], names=["topic", "partition", "offset", "index", "commit_ts", "database", "table", "key", "deletes", "first",
                  "change", "schema_id", "key_hash", "run", "_order", "_message"])
        return table, good
