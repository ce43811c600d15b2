"""The change feed's touched keys in a table's own types: the window's change log names each key by
its canonical bytes (``net_change.key_bytes``); the images are read, and matched, by typed key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, StringType

from spark.decode.effect import decode_effect
from spark.query.changes_read import arrow_schema
from spark.tables.schema_map import UnsupportedValue, arrow_table


@dataclass(frozen=True)
class TouchedKeys:
    """The window's touched keys in the table's own types (``keys``: the key columns, or a key-less
    table's whole rows), with per key the commitTs of its last change and whether that change
    deleted it -- beside the keys, not as columns among them: an upstream column may have any name."""

    keys: pa.Table
    ts: np.ndarray
    deleted: np.ndarray


def typed_keys(touched: pa.Table, schema: Schema, upstream_types: Mapping[str, str], keyed: bool) -> TouchedKeys | None:
    """The touched keys in the table's own types (as ``spark.write.upsert`` types a run's net
    rows); None if a value does not fit.

    Integer and string keys are read back from the change log's canonical key bytes
    (``net_change.key_bytes``); other keys, and a key-less table's images, from the change."""
    typed = _key_column_from_bytes(touched.column("key"), schema, upstream_types) if keyed else None
    if typed is None:
        images = _keys_from_bytes(touched.column("key").to_pylist(), schema, upstream_types) if keyed else None
        if images is None:
            images = [decode_effect(blob)[1] for blob in touched.column("change").to_pylist()]
        try:
            typed = arrow_table(schema, images, upstream_types)
        except UnsupportedValue:
            return None
    return TouchedKeys(typed, touched.column("ts").to_numpy().astype(np.int64),
                        touched.column("deletes").to_numpy(zero_copy_only=False).astype(bool))


def _key_column_from_bytes(keys: pa.ChunkedArray, schema: Schema, upstream_types: Mapping[str, str]) -> pa.Table | None:
    """``_keys_from_bytes`` for a one-column key, in Arrow: ``<length>:<tag><value>`` per key."""
    if len(schema.fields) != 1 or not len(keys):
        return None
    field = schema.fields[0]
    tag = _KEY_TAGS.get(type(field.field_type))
    if tag is None or upstream_types.get(field.name, "").lower().startswith(("enum", "set")):
        return None
    try:
        text = pc.cast(keys, pa.string())
    except pa.ArrowInvalid:
        return None  # a lone surrogate (key_bytes keeps it): the Python path reads it
    parts = pc.split_pattern(text, ":", max_splits=1)
    length, value = pc.list_element(parts, 0), pc.list_element(parts, 1)
    if not pc.all(pc.equal(pc.cast(length, pa.int64()), pc.utf8_length(value).cast(pa.int64()))).as_py():
        return None  # more than one key part
    null = pc.equal(value, "0")
    body = pc.utf8_slice_codeunits(value, 1)
    tagged = pc.or_(null, pc.starts_with(value, tag))
    if tag == "n":
        tagged = pc.and_(tagged, pc.or_(null, pc.match_substring_regex(body, r"^-?[0-9]+$")))
    if not pc.all(tagged).as_py():
        return None
    values = pc.if_else(null, pa.scalar(None, pa.string()), body)
    target = arrow_schema(schema).field(0).type
    try:
        column = pc.cast(values, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # out of the column's range: the rows decide
    return pa.table({field.name: column})


_KEY_TAGS = {IntegerType: "n", LongType: "n", StringType: "s"}


def _keys_from_bytes(keys: list[bytes], schema: Schema, upstream_types: Mapping[str, str]) -> list[dict[str, Any]] | None:
    """Key values parsed from ``key_bytes`` (length-prefixed tagged texts), when every key column is
    an integer or a string (not an ENUM or SET, which some protocols send as an index or a mask)
    and every key reads as such; else None."""
    tags = [_KEY_TAGS.get(type(f.field_type)) for f in schema.fields]
    if None in tags or any(upstream_types.get(f.name, "").lower().startswith(("enum", "set")) for f in schema.fields):
        return None
    names = [f.name for f in schema.fields]
    out = []
    for raw in keys:
        text, at, values = raw.decode("utf-8", "surrogatepass"), 0, []
        while at < len(text):
            colon = text.index(":", at)
            end = colon + 1 + int(text[at:colon])
            values.append(text[colon + 1:end])
            at = end
        if len(values) != len(tags):
            return None
        row = {}
        for name, tag, value in zip(names, tags, values):
            if value == "0":
                row[name] = None
            elif value[:1] != tag or (tag == "n" and not value[1:].lstrip("-").isdigit()):
                return None
            else:
                row[name] = int(value[1:]) if tag == "n" else value[1:]
        out.append(row)
    return out

