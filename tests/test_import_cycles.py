"""scripts/import_cycles.py: the count `make lint` holds at zero, on small packages written here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "import_cycles.py"


@pytest.fixture(scope="module")
def ic() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_cycles"] = module
    spec.loader.exec_module(module)
    return module


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def found(ic: ModuleType, root: Path) -> list[list[str]]:
    known = ic.modules_of(root, "pkg")
    return ic.cycles({m: ic.imports_of(m, p, known) for m, p in known.items()})  # type: ignore[no-any-return]


def test_a_cycle_held_only_by_a_type_checking_import_counts(ic: ModuleType, tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import B\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
            "pkg/c.py": "from pkg import a\n",
        },
    )
    assert found(ic, tmp_path) == [["pkg.a", "pkg.b"]]


def test_local_and_relative_imports_count_and_a_package_import_is_its_init(
    ic: ModuleType, tmp_path: Path
) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from .x import X\n",
            "pkg/sub/x.py": "def f():\n    from ..y import Y\nX = 1\n",
            "pkg/y.py": "from pkg.sub import X\nY = 2\n",  # the package's __init__, not x
            "pkg/z.py": "from pkg.sub import x\n",  # the submodule: no edge to pkg.sub's __init__
        },
    )
    assert found(ic, tmp_path) == [["pkg.sub", "pkg.sub.x", "pkg.y"]]


def test_no_cycle_in_a_tree_and_the_agent_has_none(ic: ModuleType, tmp_path: Path) -> None:
    write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n", "pkg/b.py": "import os\n"})
    assert found(ic, tmp_path) == []
    assert ic.main(["--quiet"]) == 0
