"""The how-tos in docs/howto/ stay true to the tree: every file path they name exists, every
``path.py::name`` is defined in that file, every link resolves, and the layering and
architecture tests name each page (so a newcomer who breaks a rule is sent to the recipe)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOWTOS = ROOT / "docs" / "howto"
PAGES = [
    "adding-a-source.md",
    "adding-a-page.md",
    "adding-a-derived-metric.md",
    "adding-an-alert-rule.md",
    "adding-a-log-format.md",
]
RULE_TESTS = ("tests/test_layering.py", "tests/test_architecture.py")
_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_ROOT_FILE = re.compile(r"^[\w.-]+\.(?:py|toml|md|csv)$")  # a file at the top: pyproject.toml


def _named(text: str) -> list[str]:
    """The repository paths (``app/ui.py``, ``docs/``, ``app/ui.py::table``) in ``text``'s
    code spans: a span with no space, no placeholder (``<page>``) and no glob, that has a
    slash and does not start with one (``/jobs`` is a URL), or is a known file at the top."""
    out = []
    for span in _CODE.findall(text):
        path = span.split("::", 1)[0]
        if any(c in span for c in " <>*=#(") or path.startswith(("/", "-", ".")):
            continue
        if "/" in path or _ROOT_FILE.match(path):
            out.append(span)
    return out


def _defines(path: Path, name: str) -> bool:
    """Whether ``path`` defines ``name`` at its top level (a function, class or assignment),
    or ``Class.method``."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    head, _, rest = name.partition(".")
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == head:
                if not rest:
                    return True
                return isinstance(node, ast.ClassDef) and any(
                    isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == rest
                    for n in node.body
                )
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if not rest and any(isinstance(t, ast.Name) and t.id == head for t in targets):
            return True
    return False


def missing(doc: Path, root: Path = ROOT) -> list[str]:
    """What ``doc`` names that ``root`` does not hold: paths, ``path::name`` definitions and
    relative links."""
    text = doc.read_text(encoding="utf-8")
    out = []
    for span in _named(text):
        path, _, name = span.partition("::")
        target = root / path
        if not target.exists():
            out.append(span)
        elif name and not (target.suffix == ".py" and _defines(target, name)):
            out.append(span)
    for link in _LINK.findall(text):
        if "://" in link or link.startswith("#"):
            continue
        if not (doc.parent / link.split("#", 1)[0]).exists():
            out.append(link)
    return out


def test_every_how_to_is_there_and_listed() -> None:
    index = (HOWTOS / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        assert (HOWTOS / page).is_file(), page
        assert f"({page})" in index, f"docs/howto/README.md does not link {page}"


def test_every_path_and_name_a_how_to_names_exists() -> None:
    docs = sorted(HOWTOS.glob("*.md"))
    assert len(docs) == len(PAGES) + 1
    bad = {doc.name: m for doc in docs if (m := missing(doc))}
    assert not bad, f"the how-tos name what the tree does not hold: {bad}"
    named = [s for doc in docs for s in _named(doc.read_text(encoding="utf-8"))]
    assert len(named) > 100 and sum("::" in s for s in named) > 40  # the check reads them


def test_the_rule_tests_send_a_newcomer_to_the_how_tos() -> None:
    text = "".join((ROOT / t).read_text(encoding="utf-8") for t in RULE_TESTS)
    for page in PAGES:
        assert f"docs/howto/{page}" in text, f"no rule test names docs/howto/{page}"


def test_the_check_finds_what_is_not_there(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        "X = 1\nY: int = 2\n\n\ndef f():\n    pass\n\n\nclass C:\n    def m(self):\n        pass\n"
    )
    (tmp_path / "pyproject.toml").write_text("")
    doc = tmp_path / "docs" / "a.md"
    doc.parent.mkdir()
    doc.write_text(
        "`pkg/mod.py::X` `pkg/mod.py::Y` `pkg/mod.py::f` `pkg/mod.py::C.m` `pkg/` "
        "`pyproject.toml` `pkg/<page>.py` `/jobs` `--x a/b` `name:value` [ok](a.md) "
        "[web](https://example.com/x)\n"
        "`pkg/gone.py` `pkg/mod.py::g` `pkg/mod.py::C.n` `pkg/mod.py::f.x` `setup.py` "
        "[gone](b.md)\n"
    )
    assert missing(doc, tmp_path) == [
        "pkg/gone.py",
        "pkg/mod.py::g",
        "pkg/mod.py::C.n",
        "pkg/mod.py::f.x",
        "setup.py",
        "b.md",
    ]
