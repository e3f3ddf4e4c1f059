"""The library's arrows point down: specs -> cost -> policy / fit -> export (views, plots, files) / plan -> CLI,
bench beside.

Every `import dsdsim...` in the package (module level or inside a function) is read with ast, each module is
given its layer by the longest matching prefix below, and an import of a higher layer fails the test, naming
the file, the line and the arrow. bench may import the layers up to export (a validation run writes its report
with dsdsim.export.validation); only the CLI imports bench. torch is imported in bench only, matplotlib only
inside the functions that draw.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "dsdsim"

# longest prefix wins; equal layers may import one another
LAYERS = {
    "dsdsim.errors": 0, "dsdsim.units": 0, "dsdsim.defaults": 0, "dsdsim.records": 0, "dsdsim.files": 0,
    "dsdsim.specs": 1,
    "dsdsim.cost": 2,
    "dsdsim.policy": 3, "dsdsim.corpus": 3, "dsdsim.fit": 3,     # fit.validation: a validation run's analysis
    "dsdsim.serve": 3,                 # the serving simulation: policies, K tables and the cost model's mixed steps
    "dsdsim.export": 4, "dsdsim.plan": 4,     # export.views, export.plots, export.validation: views, pictures, files
    "dsdsim.cli": 5, "dsdsim.__main__": 5,
    "dsdsim": 5,                       # the package's lazy public API may name anything below the CLI
}
BENCH = "dsdsim.bench"
BENCH_MAY_IMPORT = 4                   # specs, cost, policy, fit, and export (the validation report's files)


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("dsdsim"):
            names = [f"{node.module}.{a.name}" for a in node.names]
            yield node.lineno, node.module, names
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("dsdsim"):
                    yield node.lineno, a.name, [a.name]


def _target(module: str, names: list[str]) -> str:
    """`from dsdsim import cli` imports dsdsim.cli; `from dsdsim.x import f` imports dsdsim.x."""
    subs = [n for n in names if (PACKAGE.parent / (n.replace(".", "/") + ".py")).exists()
            or (PACKAGE.parent / n.replace(".", "/")).is_dir()]
    return subs[0] if subs else module


def upward_arrows(files=None) -> list[str]:
    """files: (path, module name) pairs; default every module of the package."""
    bad = []
    for path, me in files or [(p, _module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))]:
        for line, module, names in _imports(path):
            target = _target(module, names)
            where = f"{path.name}:{line}: {me} -> {target}"
            if target.startswith(BENCH):
                if not (me.startswith(BENCH) or me.startswith("dsdsim.cli")):
                    bad.append(where + " (only the CLI imports bench)")
                continue
            if me.startswith(BENCH):
                if _layer(target) > BENCH_MAY_IMPORT:
                    bad.append(where + " (bench imports specs, cost, policy, fit and export only)")
                continue
            if me == "dsdsim" and path.name == "__init__.py":
                continue
            if _layer(target) > _layer(me):
                bad.append(where)
    return bad


def test_no_upward_imports():
    bad = upward_arrows()
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_walk_finds_upward_arrows(tmp_path):
    """The check itself can fail: a cost module importing policy, and specs importing bench, are reported."""
    cost = tmp_path / "probe_cost.py"
    cost.write_text("def f():\n    from dsdsim.policy.goodput import goodput\n", encoding="utf-8")
    specs = tmp_path / "probe_specs.py"
    specs.write_text("import dsdsim.bench.model\n", encoding="utf-8")
    bad = upward_arrows([(cost, "dsdsim.cost.probe"), (specs, "dsdsim.specs.probe")])
    assert len(bad) == 2 and "dsdsim.cost.probe -> dsdsim.policy.goodput" in bad[0], bad
    assert "only the CLI imports bench" in bad[1]


@pytest.mark.parametrize("module", ["dsdsim.cost.step", "dsdsim.cost.layers", "dsdsim.cost.ops"])
def test_cost_does_not_look_names_up(module):
    """Name and file resolution lives in specs (catalog, setup); cost takes specs."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    targets = {_target(m, n) for _, m, n in _imports(path)}
    assert "dsdsim.specs.catalog" not in targets


def _third_party_imports(path: Path):
    """(line, top-level package, at module level?) of every non-dsdsim import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name.split(".")[0], id(node) in top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0], id(node) in top


def heavy_imports(files=None) -> list[str]:
    """torch outside dsdsim.bench (the CLI may, inside a command, to check it is there); matplotlib at module
    level anywhere."""
    bad = []
    for path, me in files or [(p, _module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))]:
        for line, pkg, module_level in _third_party_imports(path):
            in_cli = me.startswith("dsdsim.cli") and not module_level
            if pkg == "torch" and not (me.startswith(BENCH) or in_cli):
                bad.append(f"{path.name}:{line}: {me} imports torch (torch lives in dsdsim.bench)")
            if pkg == "matplotlib" and module_level:
                bad.append(f"{path.name}:{line}: {me} imports matplotlib at import time (import it where it draws)")
    return bad


def test_torch_only_in_bench_and_matplotlib_only_where_drawn():
    bad = heavy_imports()
    assert not bad, "\n".join(bad)


def test_the_heavy_import_check_can_fail(tmp_path):
    plots = tmp_path / "probe_plots.py"
    plots.write_text("import matplotlib.pyplot as plt\n\ndef f():\n    import torch\n", encoding="utf-8")
    bad = heavy_imports([(plots, "dsdsim.export.probe_plots")])
    assert len(bad) == 2 and "imports matplotlib at import time" in bad[0] and "imports torch" in bad[1], bad


def test_the_old_homes_of_views_and_plots_are_gone():
    """One home for views and pictures (dsdsim.export): no module, and no shim, at the old paths."""
    for old in ("report.py", "plot.py", "corpus/display.py", "bench/validate_report.py"):
        assert not (PACKAGE / old).exists(), old
    assert all("plot_points" not in p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
