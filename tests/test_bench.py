"""Every `bench/` script runs as its docstring says, and nothing in `bench/` is dead.

A bench is run by hand, rarely, so nothing else notices when the code it drives moves: five
prototypes and two profiles once sat there importing modules that no longer existed. Here each
script runs with `--help` as a person runs it (a subprocess from the repository root): exit 0,
its own usage line and its docstring's first line on stdout. Its help does not reach the code a
measurement calls, so every import in bench/ that names this repository's code — at module level
or inside a function — is resolved, and so is every attribute read off such a module (`D.read`
after `from marinctl.analysis.detect import detectors as D`). A module that is not a script
must be one a script imports. Fast: the scripts' `--help` runs in parallel, nothing is measured.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
OURS = ("marinctl", "repro", "tests", "bench")


def is_script(path: Path) -> bool:
    return any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in ast.parse(path.read_text()).body)


MODULES = sorted(BENCH.glob("*.py"))
SCRIPTS = [p for p in MODULES if is_script(p)]


@lru_cache(maxsize=1)
def helps() -> dict[str, subprocess.CompletedProcess]:
    """`python bench/<script> --help` for every script, all started at once."""
    env = {**os.environ, "PYTHONPATH": ""}   # as a person runs it: each script finds the repo itself
    procs = {p.name: subprocess.Popen([sys.executable, str(p.relative_to(ROOT)), "--help"], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for p in SCRIPTS}
    out = {}
    for name, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


def test_bench_has_its_scripts():
    """A guard on the listing itself: the scripts the README's figures name are found as scripts."""
    names = {p.name for p in SCRIPTS}
    assert {"bench_sync.py", "bench_store.py", "bench_watch.py", "bench_explain.py"} <= names, names


@pytest.mark.parametrize("script", [p.name for p in SCRIPTS])
def test_script_help_runs_and_says_what_it_measures(script):
    done = helps()[script]
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"usage: {script}" in done.stdout, done.stdout[:500]
    first = ast.get_docstring(ast.parse((BENCH / script).read_text())).splitlines()[0]
    assert " ".join(first.split()) in " ".join(done.stdout.split()), f"{script}: --help does not show its docstring"


def test_every_module_is_a_script_or_imported_by_one():
    """No library module in bench/ that no script uses."""
    imported = set()
    for path in SCRIPTS:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.removeprefix("bench."))
            elif isinstance(node, ast.Import):
                imported |= {a.name.removeprefix("bench.") for a in node.names}
    unused = [p.name for p in MODULES if p not in SCRIPTS and p.stem not in imported]
    assert unused == [], f"bench modules no script imports: {unused}"


def _resolve(module: str):
    """The module object for a dotted name of this repository; bench's own by file (not imported: a
    bench module runs its set-up at import), so those give the set of names defined at its top level."""
    parts = module.split(".")
    if parts[0] == "bench" or (BENCH / f"{parts[0]}.py").is_file():
        file = BENCH / f"{parts[-1]}.py"
        if not file.is_file():
            raise ModuleNotFoundError(module)
        tree = ast.parse(file.read_text())
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        return names
    return importlib.import_module(module)


def _older_tree_imports(tree: ast.AST) -> set[int]:
    """Imports in an `except ImportError:` handler: a bench measuring an older tree (`--base`) with
    this script finds that tree's modules there, which this tree need not have."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                if isinstance(handler.type, ast.Name) and handler.type.id in ("ImportError", "ModuleNotFoundError"):
                    out |= {id(n) for stmt in handler.body for n in ast.walk(stmt)
                            if isinstance(n, (ast.Import, ast.ImportFrom))}
    return out


def _has(owner, name: str, module: str) -> bool:
    if isinstance(owner, set):
        return name in owner
    if hasattr(owner, name):
        return True
    try:   # `from marinctl.store import metrics` names a submodule
        importlib.import_module(f"{module}.{name}")
        return True
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_what_bench_imports_from_this_repository_exists(path):
    """Every import of this repository's code, nested ones included, and every attribute read off
    a module so imported: what a run past `--help` would reach."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, tuple[object, str]] = {}   # local name -> (module, dotted name)
    missing = []
    older = _older_tree_imports(tree)
    for node in ast.walk(tree):
        if id(node) in older:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OURS or (BENCH / f"{a.name}.py").is_file():
                    try:
                        mod = _resolve(a.name)
                    except ModuleNotFoundError:
                        missing.append(f"{node.lineno}: import {a.name}")
                        continue
                    if a.asname:
                        aliases[a.asname] = (mod, a.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            top = node.module.split(".")[0]
            if top not in OURS and not (BENCH / f"{top}.py").is_file():
                continue
            try:
                mod = _resolve(node.module)
            except ModuleNotFoundError:
                missing.append(f"{node.lineno}: from {node.module}")
                continue
            for a in node.names:
                if not _has(mod, a.name, node.module):
                    missing.append(f"{node.lineno}: from {node.module} import {a.name}")
                elif not isinstance(mod, set):
                    sub = getattr(mod, a.name, None) or importlib.import_module(f"{node.module}.{a.name}")
                    if isinstance(sub, type(sys)):
                        aliases[a.asname or a.name] = (sub, f"{node.module}.{a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            mod, name = aliases[node.value.id]
            if not _has(mod, node.attr, name):
                missing.append(f"{node.lineno}: {node.value.id}.{node.attr} ({name} has no {node.attr})")
    assert missing == [], f"{path.name}: " + "; ".join(missing)
