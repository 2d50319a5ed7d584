"""The one-way doors of the architecture, enforced by walking imports."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(folder: str) -> dict[str, set[str]]:
    out = {}
    for path in (ROOT / folder).rglob("*.py"):
        mods: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = mods
    return out


def test_telemetry_never_imports_presentation() -> None:
    for path, mods in _imports("telemetry").items():
        assert not mods & {"dash", "plotly", "dash_bootstrap_components", "app"}, path


def test_app_never_touches_the_database() -> None:
    for path, mods in _imports("app").items():
        assert "duckdb" not in mods, path


def test_no_sql_in_app() -> None:
    for path in (ROOT / "app").rglob("*.py"):
        text = path.read_text().upper()
        assert "SELECT " not in text and "INSERT INTO" not in text, path


def test_no_cdn_links_in_assets_or_app() -> None:
    for folder in ("app", "assets"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".css", ".js", ".html"}:
                text = path.read_text(errors="ignore")
                assert "cdn." not in text and "https://fonts" not in text, path
