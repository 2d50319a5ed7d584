"""The one-way doors of the architecture, enforced by walking imports."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOOR = ("app/pages", "app/figures")  # reach telemetry only through app/data/, the one door
PAGE_HOWTO = "docs/howto/adding-a-page.md"  # the door, the floors and the tests of a new page


def _imports(folder: str, root: Path = ROOT) -> dict[str, set[str]]:
    out = {}
    for path in (root / folder).rglob("*.py"):
        mods: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods.add(node.module.split(".")[0])
        out[str(path.relative_to(root))] = mods
    return out


def _through_the_door_only(root: Path = ROOT) -> list[str]:
    """Modules of pages and figures that import ``telemetry`` (or hold the store) themselves."""
    bad = []
    for folder in DOOR:
        for path, mods in _imports(folder, root).items():
            tree = ast.parse((root / path).read_text())
            holds_store = any(
                isinstance(n, ast.Attribute) and n.attr == "store" for n in ast.walk(tree)
            )
            if "telemetry" in mods or holds_store:
                bad.append(path)
    return sorted(bad)


def _pass_throughs(root: Path = ROOT) -> list[str]:
    """Functions of ``app/data`` whose body (a docstring aside) only hands its own arguments, in
    order, to one other module's function, the store first or not: a wrapper that does no
    work. A query offered as it is is ``services.bound(query)``; a name, a re-export."""
    out = []
    for path in sorted((root / "app" / "data").glob("*.py")):
        for fn in ast.parse(path.read_text()).body:
            if not isinstance(fn, ast.FunctionDef) or fn.args.defaults or fn.decorator_list:
                continue
            body = [n for n in fn.body if not isinstance(n, ast.Expr)]
            call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            if not isinstance(call.func.value, ast.Name):  # ``{...}.get(key)`` is work
                continue
            if any(k.arg != ast.unparse(k.value) for k in call.keywords):
                continue  # an option chosen for the page is work
            args = [ast.unparse(a) for a in call.args] + [str(k.arg) for k in call.keywords]
            args = args[1:] if args[:1] == ["store()"] else args
            if args == [a.arg for a in fn.args.args]:
                out.append(f"{path.relative_to(root)}::{fn.name}")
    return out


def test_telemetry_never_imports_presentation() -> None:
    for path, mods in _imports("telemetry").items():
        assert not mods & {"dash", "plotly", "dash_bootstrap_components", "app"}, path


def test_app_never_touches_the_database() -> None:
    for path, mods in _imports("app").items():
        assert "duckdb" not in mods, path


def test_pages_and_figures_reach_telemetry_only_through_the_data_adapter() -> None:
    assert _through_the_door_only() == [], PAGE_HOWTO


def test_the_data_adapters_hold_no_pass_through_wrappers() -> None:
    found = _pass_throughs()
    assert not found, f"wrappers that only pass a call on ({PAGE_HOWTO}): {found}"


def test_the_wrapper_check_finds_one_and_spares_work(tmp_path: Path) -> None:
    (tmp_path / "app" / "data").mkdir(parents=True)
    (tmp_path / "app" / "data" / "x.py").write_text(
        "def a(tr):\n    return q.outliers(store(), tr)\n"  # the store, then its arguments
        'def b(run_id, tr):\n    """Doc."""\n    return q.f(store(), run_id, tr=tr)\n'
        "def c(block):\n    return good.top_badput(block)\n"  # no store: still a wrapper
        "def d(key):\n    return q.job_gpus(store(), str(key)[:300])\n"  # cleans the input
        "def e(run_id):\n    return q.f(store(), run_id, detail=False)\n"  # an option chosen
        "def f(key):\n    return {'temp': 1}.get(key)\n"
        "def g(n=3):\n    return q.top(store(), n)\n"  # a default of its own
        "h = bound(q.outliers)\n"
    )
    assert _pass_throughs(tmp_path) == ["app/data/x.py::a", "app/data/x.py::b", "app/data/x.py::c"]


def test_the_door_check_finds_a_page_that_goes_around_it(tmp_path: Path) -> None:
    # Pages as they were before the door (main at 688afdb): queries called with the store.
    around = {
        "app/pages/a.py": "from telemetry.queries import gpus as q\n",
        "app/pages/b.py": "import telemetry.reliability\n",
        "app/figures/c.py": "from telemetry import reliability\n",
        "app/pages/d.py": "from app.data import services\n\nq.outliers(services.store(), tr)\n",
        "app/pages/ok.py": "from app.data import gpus as data\n\ndata.gpu_outliers(tr)\n",
        "app/ok.py": "from telemetry import queries\n",  # the adapter's side of the door
    }
    for path, text in around.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    bad = ["app/figures/c.py", "app/pages/a.py", "app/pages/b.py", "app/pages/d.py"]
    assert _through_the_door_only(tmp_path) == bad


def test_ruff_bans_telemetry_in_pages_and_figures() -> None:
    """The same rule as a lint error (TID251), where an editor shows it while typing."""
    for path, banned in {
        "app/pages/probe.py": True,
        "app/figures/probe.py": True,
        "app/data/view.py": False,
        "app/ui.py": False,
        "telemetry/queries/probe.py": False,
    }.items():
        out = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--select", "TID251"]
            + ["--stdin-filename", path, "-"],
            input="from telemetry.queries import gpus\n\ngpus.metric('util')\n",
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert ("TID251" in out.stdout) == banned, (path, out.stdout, out.stderr)
        assert out.returncode == int(banned), (path, out.stdout, out.stderr)


def test_no_sql_in_app() -> None:
    for path in (ROOT / "app").rglob("*.py"):
        text = path.read_text().upper()
        assert "SELECT " not in text and "INSERT INTO" not in text, (path, PAGE_HOWTO)


def test_no_cdn_links_in_assets_or_app() -> None:
    vendored = ROOT / "app" / "static"  # plotly's own bundle, unmodified (checked below)
    for folder in ("app", "assets"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".css", ".js", ".html"}:
                if path.is_relative_to(vendored):
                    continue
                text = path.read_text(errors="ignore")
                assert "cdn." not in text and "https://fonts" not in text, path
    # The bundle names a CDN once: the default topojson address of geo maps, a trace type it
    # does not hold, so nothing in it ever fetches from there.
    bundle = (vendored / "plotly-cartesian.min.js").read_text()
    assert re.findall(r'[^"\s]*cdn\.[^"\s]*', bundle) == ["https://cdn.plot.ly/un/"]
    assert 'topojsonURL:{valType:"string",noBlank:!0,dflt:"https://cdn.plot.ly/un/"' in bundle
