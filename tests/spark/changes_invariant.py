"""The change feed against the reference model: what ``read_changes(W1, W2)`` must be, for any two published Ws.

For every table (every upstream name at W1 or W2, all at once), with the model's rows at W1 and
W2 (``tests/model/oracle.py``, which shares no code with tidelake):

- every before image (``delete``, ``update_before``) is a row of the model at W1, taken once;
- the model's rows at W1 without the before images, in W2's columns, plus the after images
  (``insert``, ``update_after``), are the model's rows at W2 (applied: the table at W2);
- minimal: as many changes as rows differ between W1 (in W2's columns) and W2, counting copies;
- an update's images share the key and differ; every ``_commit_ts`` is in (W1, W2]; given the
  model's removals (``removed_at``), a ``delete``'s is the commitTs of the last removal of its row
  in the window -- its DELETE, or the DDL that took it (a partition's: the one that held it) --
  unless the table's reason says it cannot be told;
- a table either W lists as isolated is left out and named in ``isolated``; a retired W fails
  naming the nearest retained ones.

Rows compare as the state machine compares them (``archive.normalise``: NULLs left out), columns by
name: the histories of the machine add columns, they do not rename them (targeted tests in
``test_changes.py`` cover renamed and dropped columns). A column of W1 the feed keeps apart under
a name with leading underscores (W2 holds its name: another table's column of another kind, made
anew in the window) is W1's column of that name in a before image.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from spark.query.changes import CHANGE_TYPES, DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, read_changes
from spark.commit.published import published_watermarks, read_published, retired_watermarks
from spark.query.read import RetiredWatermark


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(map(_hashable, value))
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _canon(row: dict[str, Any]) -> tuple:
    """A row as a multiset element: its non-NULL values by column, equal as Python compares them."""
    return tuple(sorted((k, _hashable(v)) for k, v in row.items() if v is not None))


def _project(row: tuple, columns: set[str]) -> tuple:
    return tuple((k, v) for k, v in row if k in columns)


def _w1_names(dropped: tuple[str, ...], columns1: set[str]) -> dict[str, str]:
    """The feed's name of each column of W1 it keeps apart -> its name at W1 (the feed adds leading
    underscores while W2 holds the name: ``changes._free``)."""
    out = {}
    for name in dropped:
        stripped = name
        while stripped not in columns1 and stripped.startswith("_"):
            stripped = stripped[1:]
        if stripped in columns1 and stripped != name:
            out[name] = stripped
    return out


def check_pair(config: Any, model_at: dict[int, dict], w1: int, w2: int, storage: Any,
               removed_at: Callable[[tuple[str, str], dict[str, Any], int, int], int | None] | None = None) -> None:
    """``read_changes(w1, w2)`` against the model at both Ws (see the module doc); ``removed_at(name,
    row, w1, w2)``: the model's commitTs of what removed ``row`` of W1 in the window (None: not told)."""
    changes = read_changes(config, w1, w2)
    assert (changes.from_watermark, changes.to_watermark) == (w1, w2)
    held = set()
    for w in (w1, w2) if w1 else (w2,):  # 0: before the first W, nothing published or held
        held |= {(e["database"], e["table"]) for e in read_published(storage, config.name, w).get("isolated", [])}
    assert set(changes.isolated) == held, (w1, w2, changes.isolated)
    assert not set(changes) & held, f"isolated tables in the changes {w1}..{w2}"
    names = (set(model_at[w1]) | set(model_at[w2]) | set(changes)) - held
    for name in sorted(names):
        at1, at2 = model_at[w1].get(name, []), model_at[w2].get(name, [])
        table = changes.get(name)
        if table is None:
            assert Counter(map(_canon, at1)) == Counter(map(_canon, at2)), f"{name}: changed {w1}..{w2}, yet no changes"
            continue
        detail = changes.details[name]
        meta = {detail.change_type_column, detail.commit_ts_column}
        columns2 = {c for c in table.column_names if c not in meta and c not in detail.dropped_columns}
        rows = table.to_pylist()
        where = f"{name[0]}.{name[1]} {w1}..{w2} ({detail.read}: {detail.reason})"
        assert {r[detail.change_type_column] for r in rows} <= set(CHANGE_TYPES), where
        assert all(w1 < r[detail.commit_ts_column] <= w2 for r in rows), \
            (where, [r[detail.commit_ts_column] for r in rows])
        image = [{k: v for k, v in r.items() if k not in meta} for r in rows]
        kinds = [r[detail.change_type_column] for r in rows]
        named = _w1_names(detail.dropped_columns, {c for row in at1 for c in row})
        before = Counter(_canon({named.get(c, c): v for c, v in i.items()}) for i, k in zip(image, kinds)
                         if k in (DELETE, UPDATE_BEFORE))
        after = Counter(_project(_canon(i), columns2) for i, k in zip(image, kinds) if k in (INSERT, UPDATE_AFTER))
        state = Counter(map(_canon, at1))
        assert not before - state, f"{where}: before images that are not rows at W1: {before - state}"
        in_w2 = Counter(_project(r, columns2) for r in state.elements())
        applied = Counter(_project(r, columns2) for r in (state - before).elements()) + after
        want = Counter(map(_canon, at2))
        assert applied == want, f"{where}: W1 with the changes applied is not W2: {applied - want} / {want - applied}"
        differ = sum(((in_w2 - want) + (want - in_w2)).values())
        assert sum(before.values()) + sum(after.values()) == differ, f"{where}: not minimal"
        for i in range(len(rows) - 1):  # an update's two images are adjacent, before first
            if kinds[i] == UPDATE_BEFORE:
                assert kinds[i + 1] == UPDATE_AFTER, where
                assert _project(_canon(image[i]), columns2) != _project(_canon(image[i + 1]), columns2), where
        assert kinds.count(UPDATE_BEFORE) == kinds.count(UPDATE_AFTER), where
        if removed_at is not None and "_commit_ts of a removed row" not in (detail.reason or ""):  # else: it says why not
            got = [(i, r[detail.commit_ts_column]) for i, r, k in zip(image, rows, kinds) if k == DELETE]
            want = [(i, removed_at(name, i, w1, w2)) for i, _ in got]
            assert [g for g, w in zip(got, want) if w[1] is not None] == [w for w in want if w[1] is not None], \
                f"{where}: a delete's _commit_ts is not what removed the row"


def check_changes(machine: Any, every_pair: bool = False) -> None:
    """The change feed of every two consecutive retained published Ws of a ``test_operations`` machine,
    of one more pair, from 0 (before the first W) to one, and from one retired W (picked by the published
    Ws: the same history checks the same). ``every_pair``: of every two retained Ws, 0 among them (once a
    history, at its end: after every step it would be quadratic in the Ws)."""
    storage, config = machine.storage, machine.config
    published = published_watermarks(storage, config.name)
    rng = random.Random(sum(published) + len(published))
    retired = set(retired_watermarks(storage, config.name))
    retained = [w for w in published if w not in retired]
    if every_pair:
        pairs = list(itertools.combinations([0, *retained], 2))
    else:
        pairs = list(itertools.pairwise(retained))
        if len(retained) > 2:
            a, b = sorted(rng.sample(retained, 2))
            pairs.append((a, b))
        if retained:
            pairs.append((0, rng.choice(retained)))  # from before the first W: a first load in the feed's form
    for w1, w2 in pairs:
        check_pair(config, machine.model_at, w1, w2, storage)
    if retired and retained:
        w = rng.choice(sorted(retired))
        with pytest.raises(RetiredWatermark, match="nearest retained"):
            read_changes(config, w, retained[-1]) if w < retained[-1] else read_changes(config, retained[0], w)
