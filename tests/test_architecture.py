"""The house's rule, checked: ``spark/`` rooms import downward only, and no modules import each
other in a circle (docs/architecture.md, "Floors"). An import counts wherever it is written,
inside a function too: a lazy import hides a circle from Python, not from a reader."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Lowest first. A room may import its own floor and those below it, never one above.
FLOORS = ("config", "core", "runtime", "archive", "decode", "fold", "tables", "write", "commit", "maintain",
          "repair", "query", "jobs", "demo", "cli")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each spark module and the spark modules it imports (``from spark.x import y`` counts as
    ``spark.x.y`` when that is a module, else ``spark.x``)."""
    modules = {_module(p): p for p in (ROOT / "spark").rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        out[name] = found
    return out


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_room_of_spark_has_a_floor() -> None:
    rooms = {p.name for p in (ROOT / "spark").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    rooms |= {p.stem for p in (ROOT / "spark").glob("*.py") if p.stem != "__init__"}
    assert rooms <= set(FLOORS), f"rooms without a floor in FLOORS: {sorted(rooms - set(FLOORS))}"


def test_rooms_import_downward_only() -> None:
    up = sorted(f"{a} -> {b}" for a, targets in _imports().items() for b in targets
                if _room(a) in FLOORS and _room(b) in FLOORS and FLOORS.index(_room(b)) > FLOORS.index(_room(a)))
    assert not up, "imports that run back up a floor:\n" + "\n".join(up)


def test_no_module_imports_itself_through_others() -> None:
    graph = _imports()
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not circles, "modules importing each other in a circle:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_ground_floor_imports_no_stage() -> None:
    above = sorted({b for a, targets in _imports().items() if _room(a) == "core" for b in targets if _room(b) != "core"})
    assert not above, f"spark/core imports {above}"


def test_no_private_name_is_imported_from_another_module() -> None:
    """A name with a leading underscore is its module's own: another module that needs it gets a
    public name (``from spark.x import _y`` in spark/ fails here; tests may reach in)."""
    crossing = []
    for path in sorted((ROOT / "spark").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spark"):
                crossing += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")]
    assert not crossing, "\n".join(crossing)
