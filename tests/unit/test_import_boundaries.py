"""storage_core must stay free of the pipeline and its frameworks (checked on the source)."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN = {"airflow", "pyspark", "great_expectations", "jobs", "dags", "plugins", "embedded"}
PACKAGE = Path(__file__).resolve().parents[2] / "storage_core"


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_storage_core_never_imports_pipeline_modules() -> None:
    sources = list(PACKAGE.rglob("*.py"))
    assert len(sources) > 10
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(imported_roots(path) & FORBIDDEN)
        for path in sources
        if imported_roots(path) & FORBIDDEN
    }
    assert offenders == {}


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom airflow.sdk import dag\nimport pyspark.sql as ps\n")
    assert imported_roots(bad) & FORBIDDEN == {"airflow", "pyspark"}
