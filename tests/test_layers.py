"""The layers import one way: format → store → analysis → render/cli → export. Nothing below
the presenters imports them (the message object, msg_id and the body format live in
``format``, so a lookup or a salvage below ``render`` never needs it), and ``format`` decodes
bytes without the store's files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rmqinspect"

# What each lower layer may import from the package, function-level and TYPE_CHECKING imports
# included: a lazy import is still a dependency.
ALLOWED = {
    "format": {"errors", "format"},
    "store": {"errors", "format", "store"},
    "analysis": {"errors", "format", "store", "analysis"},
}


def imported_layers(path: Path) -> set[str]:
    """The top-level packages under ``rmqinspect`` that ``path`` imports."""
    layers: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "rmqinspect" and len(parts) > 1:
                layers.add(parts[1])
    return layers


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(layer: str) -> None:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files
    wrong = {
        str(f.relative_to(PACKAGE)): sorted(imported_layers(f) - ALLOWED[layer]) for f in files
    }
    assert {f: w for f, w in wrong.items() if w} == {}


def test_the_check_sees_lazy_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f() -> None:\n    from rmqinspect.render.message import x\n")
    assert imported_layers(source) == {"render"}
