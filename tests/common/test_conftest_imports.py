"""No test module imports ``conftest``: shared helpers live in uniquely named modules.

Every test folder has a ``conftest.py`` and pytest's default (prepend) import mode imports each under the
one module name ``conftest``, so ``from conftest import x`` finds whichever folder's conftest was imported
first or last, not its own. CI of session 11 failed on it: tests/planner/test_predictors.py imported
``queue_profile`` inside a test and got tests/worker/conftest.py; ``pytest tests/planner/test_policy.py
tests/worker/test_perf.py`` fails the same way at collection, with the import at module level.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def conftest_imports(source: str) -> list[int]:
    """Lines of ``import conftest`` / ``from conftest import ...``, at any depth."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "conftest" and node.level == 0:
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_check_sees_every_form() -> None:
    src = "from conftest import a\n\ndef test_x():\n    from conftest import b\n    import conftest\nfrom .conftest import c\n"
    assert conftest_imports(src) == [1, 4, 5]


def test_no_test_module_imports_conftest() -> None:
    files = [p for d in ("tests", "e2e") for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 100  # the tree was found
    found = {str(p.relative_to(ROOT)): n for p in files if (n := conftest_imports(p.read_text()))}
    assert found == {}, f"move what these import into a uniquely named helper module: {found}"
