"""The map matches the tree: the README's "Where things are" and docs/architecture.md name
every package of ``app/`` and ``telemetry/`` and every module at their roots (the telemetry
root is where a newcomer gets lost: #59), and name no module or folder that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("app", "telemetry")
# A path as the map writes it: folders (``app/shell/``), a module (``sources.py``) or both
# (``telemetry/store/rollups.py``); never one that starts with a slash (``/api/v1``, a URL).
_PATH = re.compile(r"(?<![\w/.:-])((?:[A-Za-z_][\w-]*/)+(?:\w+\.py\b)?|\w+\.py\b)")


def _named(text: str) -> tuple[set[str], set[str]]:
    """The modules (``x.py``) and folders (``x``) the paths in ``text`` name, at any depth."""
    files, dirs = set(), set()
    for path in _PATH.findall(text):
        *folders, last = path.split("/")
        dirs |= set(folders)
        if last:
            files.add(last)
    return files, dirs


def parts(root: Path = ROOT) -> set[str]:
    """Every folder below ``app/`` and ``telemetry/`` (``store/``) and every module at their
    roots (``sources.py``), as the map spells them; ``__init__.py`` and caches left out."""
    out = set()
    for top in TOP:
        for path in (root / top).iterdir():
            if path.is_dir() and path.name != "__pycache__":
                out.add(path.name + "/")
            elif path.suffix == ".py" and path.name != "__init__.py":
                out.add(path.name)
    return out


def readme_map(root: Path = ROOT) -> str:
    text = (root / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Where things are\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def unnamed(text: str, root: Path = ROOT) -> list[str]:
    """The parts of the tree ``text`` does not name."""
    files, dirs = _named(text)
    return sorted(parts(root) - files - {d + "/" for d in dirs})


def stale(text: str, root: Path = ROOT) -> list[str]:
    """Modules (``x.py``) and folders (``x/``) ``text`` names that are nowhere in the tree."""
    files = {p.name for p in root.rglob("*.py") if ".venv" not in p.parts}
    dirs = {p.name for p in root.rglob("*") if p.is_dir() and ".venv" not in p.parts}
    named_files, named_dirs = _named(text)
    return sorted((named_files - files) | {d + "/" for d in named_dirs - dirs})


def test_the_readme_map_names_every_package_and_root_module() -> None:
    text = readme_map()
    assert not unnamed(text), f"README 'Where things are' does not name {unnamed(text)}"
    assert not stale(text), f"README 'Where things are' names what is gone: {stale(text)}"


def test_the_architecture_names_every_package_and_root_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"`([^`\n]+)`", text))  # prose has "tokens/s", "used/free"
    assert not unnamed(code), f"docs/architecture.md does not name {unnamed(code)}"
    assert not stale(code), f"docs/architecture.md names what is gone: {stale(code)}"


def test_the_check_finds_a_part_left_out_and_one_gone(tmp_path: Path) -> None:
    for rel in ("app/main.py", "app/pages/x.py", "telemetry/__init__.py", "telemetry/goodput.py",
                "telemetry/store/store.py", "telemetry/reference/a.csv"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert parts(tmp_path) == {"main.py", "pages/", "goodput.py", "store/", "reference/"}
    text = "main.py the app\n  (app/pages/) /api/v1/x store/ goodput.pyc old.py gone/\n"
    assert unnamed(text, tmp_path) == ["goodput.py", "reference/"]
    assert stale(text, tmp_path) == ["gone/", "old.py"]
    assert unnamed("telemetry/store/store.py app/main.py app/pages/ telemetry/reference/"
                   " telemetry/goodput.py", tmp_path) == []  # fmt: skip


def test_the_readme_benchmark_section_is_the_table_and_links() -> None:
    """The diary of how the figures were reached lives in docs/benchmarks-history.md; the
    README keeps one table of the latest runs, a few lines saying what they are, and links."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## How fast: `make bench`\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.strip()]
    prose = [line for line in lines if not line.startswith("|")]
    assert len(lines) - len(prose) >= 10, "the README's benchmark table is gone"
    assert len(prose) <= 10, f"{len(prose)} lines of prose: the diary goes to the notebook"
    assert "(docs/benchmarks.md)" in section and "(docs/benchmarks-history.md)" in section
