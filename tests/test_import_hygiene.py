"""Start-up stays light: `--help` imports none of the heavy packages (layer rules: test_architecture.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("textual", "textual_plotext", "torch", "wandb", "scipy", "plotext")


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from marinctl.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_every_subcommand_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from marinctl.cli import app, main\n"
        "import typer.main\n"
        "cmd = typer.main.get_command(app)\n"
        "names = sorted(cmd.commands)\n"
        "for n in names:\n"
        "    try:\n        main([n, '--help'])\n    except SystemExit:\n        pass\n"
        f"print(names, sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].endswith("[]"), out.stdout.splitlines()[-1]
