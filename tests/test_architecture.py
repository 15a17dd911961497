"""The house rules in ARCHITECTURE.md, read from that file and checked against every import.

The layers table is the rule: each file belongs to the layer whose `where` names it (longest
match), and every `import` in it — at module level or inside a function — may name only the
layers its row allows. Third-party packages in a row's last column are imported by the layers
whose row names them and by no other. The rooms list must name every module that exists and
nothing that does not. Writing SQL, naming a stored table in SQL, and printing are confined to
the layers ARCHITECTURE.md gives them.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "ARCHITECTURE.md"
PACKAGES = ("marinctl", "repro")
MAX_LINES = 600
MIGRATIONS = ROOT / "marinctl" / "store" / "migrations"


def migration_tables() -> tuple[str, ...]:
    """Every table the numbered migrations create, and the store's own migrations table."""
    found = {"schema_migrations"}
    for sql in sorted(MIGRATIONS.glob("*.sql")):
        found |= set(re.findall(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", sql.read_text(), re.I))
    return tuple(sorted(found))


TABLES = migration_tables()
SQL_WRITE = re.compile(
    r"\b(INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
    r"CREATE\s+(OR\s+REPLACE\s+)?(TEMP\s+|TEMPORARY\s+)?(TABLE|VIEW|INDEX|SEQUENCE)|DROP\s+(TABLE|VIEW|INDEX|SEQUENCE)|ALTER\s+TABLE)\b"
)
SQL_TABLE = re.compile(r"\b(FROM|JOIN|INTO|UPDATE)\s+(" + "|".join(TABLES) + r")\b")
QUIET_LAYERS = ("ground", "sources", "store", "analysis", "sync", "web")
# ARCHITECTURE.md, Layers: the package's module `__getattr__` is the ground floor's one door to
# the api layer (`marinctl.open` imported on first use); (file, function, the layer it may reach).
LAZY_DOOR = ("marinctl/__init__.py", "__getattr__", "api")


# --- reading ARCHITECTURE.md ---------------------------------------------------------------

@lru_cache(maxsize=1)
def layers() -> dict[str, dict]:
    """{layer: {"where": [...], "may": {...}, "third": {...}}} from the layers table."""
    text = DOC.read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        name, where, may, third = cells
        out[name] = {
            "where": re.findall(r"`([^`]+)`", where),
            "may": {m.strip() for m in may.split(",") if m.strip() and not m.strip().startswith("(")},
            "third": {t.strip() for t in third.split(",") if t.strip()},
        }
    assert out, "ARCHITECTURE.md has no layers table"
    return out


def rooms() -> set[str]:
    text = DOC.read_text()
    section = text.split("## Rooms", 1)[1].split("\n## ", 1)[0] if "## Rooms" in text else ""
    return set(re.findall(r"^\s*-\s+`([^`]+)`", section, re.M))


def layer_of(rel: str) -> str | None:
    best, best_len = None, -1
    for name, spec in layers().items():
        for where in spec["where"]:
            if (rel == where or (where.endswith("/") and rel.startswith(where))) and len(where) > best_len:
                best, best_len = name, len(where)
    return best


# --- reading the code ------------------------------------------------------------------------

def source_files() -> list[Path]:
    files = []
    for pkg in PACKAGES:
        files += [p for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(files)


def module_file(module: str) -> str | None:
    """The repository path of a dotted module name inside this repo, if it is one."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = ROOT.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py").relative_to(ROOT).as_posix()
    if (base / "__init__.py").is_file():
        return (base / "__init__.py").relative_to(ROOT).as_posix()
    return None


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for every import in the file, nested ones included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(ROOT)
    package = list(rel.with_suffix("").parts[:-1]) if rel.name != "__init__.py" else list(rel.parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            for alias in node.names:  # `from marinctl import paths` imports the module marinctl.paths
                if module_file(f"{mod}.{alias.name}"):
                    found.append((node.lineno, f"{mod}.{alias.name}"))
    return found


def strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            out.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)))
    return out


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def door_lines(path: Path) -> set[int]:
    """The lines of LAZY_DOOR's function, when `path` is its file (else none)."""
    if rel(path) != LAZY_DOOR[0]:
        return set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == LAZY_DOOR[1]:
            return set(range(node.lineno, node.end_lineno + 1))
    return set()


# --- the rules ---------------------------------------------------------------------------------

def test_every_file_has_a_layer():
    assert [rel(p) for p in source_files() if layer_of(rel(p)) is None] == []


def test_imports_follow_the_layers():
    offenders = []
    for path in source_files():
        mine = layer_of(rel(path))
        allowed = layers()[mine]["may"] | {mine}
        door = door_lines(path)
        for line, mod in imports(path):
            target = module_file(mod)
            if target is None:
                if mod.split(".")[0] in PACKAGES:
                    target = f"{mod.split('.')[0]}/__init__.py"
                else:
                    continue
            theirs = layer_of(target)
            if theirs not in allowed and not (theirs == LAZY_DOOR[2] and line in door):
                offenders.append(f"{rel(path)}:{line} ({mine}) imports {mod} ({theirs})")
    assert offenders == [], "\n".join(offenders)


def test_the_lazy_door_is_lazy():
    """`import marinctl` loads no other module of marinctl: the door opens on first use only."""
    code = "import sys, marinctl; print(sorted(m for m in sys.modules if m.startswith('marinctl')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['marinctl']"], out.stdout
    assert door_lines(ROOT / LAZY_DOOR[0]), f"{LAZY_DOOR[0]} has no {LAZY_DOOR[1]} (a guard on the reader itself)"


def test_third_party_packages_stay_in_their_layers():
    owners: dict[str, set[str]] = {}
    for name, spec in layers().items():
        for pkg in spec["third"]:
            owners.setdefault(pkg, set()).add(name)
    offenders = []
    for path in source_files():
        mine = layer_of(rel(path))
        for line, mod in imports(path):
            top = mod.split(".")[0]
            if top in owners and mine not in owners[top]:
                offenders.append(f"{rel(path)}:{line} ({mine}) imports {mod} (only {', '.join(sorted(owners[top]))})")
    assert offenders == [], "\n".join(offenders)


def test_sql_writes_and_table_names_only_in_the_store():
    offenders = []
    for path in source_files():
        if rel(path).startswith("marinctl/store/"):
            continue
        for line, text in strings(path):
            if "marinctl sql" in text:   # a hint naming a command the user can run
                continue
            if SQL_WRITE.search(text) or SQL_TABLE.search(text):
                offenders.append(f"{rel(path)}:{line}: {' '.join(text.split())[:90]}")
    assert offenders == [], "\n".join(offenders)


def test_quiet_layers_do_not_print():
    offenders = []
    for path in source_files():
        if layer_of(rel(path)) not in QUIET_LAYERS:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "input"):
                offenders.append(f"{rel(path)}:{node.lineno}: {node.func.id}()")
            if (isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr")
                    and isinstance(node.value, ast.Name) and node.value.id == "sys"):
                offenders.append(f"{rel(path)}:{node.lineno}: sys.{node.attr}")
    assert offenders == [], "\n".join(offenders)


def test_no_source_file_over_the_limit():
    long = [f"{rel(p)}: {n}" for p in source_files() if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert long == [], long


def test_rooms_list_every_module_and_nothing_else():
    listed = rooms()
    existing = {rel(p) for p in source_files()}
    missing = sorted(existing - listed)
    ghosts = sorted(p for p in listed if not (ROOT / p).exists())
    assert (missing, ghosts) == ([], []), f"not in ARCHITECTURE.md: {missing}; listed but absent: {ghosts}"


def test_tables_section_names_every_table_the_migrations_create():
    text = DOC.read_text()
    section = text.split("## Tables and their owners", 1)[1].split("\n## ", 1)[0]
    described = set(re.findall(r"`(\w+)`", "\n".join(l.split("|")[1] for l in section.splitlines()
                                                   if l.startswith("|") and l.count("|") > 2)))
    assert set(TABLES) - described == set(), f"tables no row of ARCHITECTURE.md describes: {sorted(set(TABLES) - described)}"
    assert len(TABLES) > 8   # the migrations were read (a guard on the reader itself)


def test_every_package_has_its_section():
    """Each package folder is introduced by a heading of its own in the rooms list."""
    text = DOC.read_text()
    section = text.split("## Rooms", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^#{3,4}\s+(\S+)", section, re.M)
    packages = sorted({rel(p.parent) for p in source_files() if p.name == "__init__.py"} - set(PACKAGES))
    short = [p.split("/", 1)[1] + "/" if p.startswith("marinctl/") else p + "/" for p in packages]
    missing = [p for p in short if p not in headings]
    assert missing == [], f"packages with no heading in ARCHITECTURE.md's rooms: {missing}"


@pytest.mark.parametrize("probe", ["marinctl/store/x.py", "marinctl/tui/widgets/x.py", "repro/x.py", "marinctl/numbers.py"])
def test_layer_lookup(probe):
    """The table resolves nested folders and single files (a guard on the parser itself)."""
    assert layer_of(probe) is not None


# --- documents that stay true ---------------------------------------------------------------
# Comments, docstrings and the repository's documents name files; a file that moved or went leaves
# a reference nobody checks. The research notes the team wrote live outside the repository, so a
# reader of the code cannot follow them: code cites the upstream source the note itself gives (a
# Marin file, an issue such as marin#8435, a paper), never the note.

NOTES = ("marin", "wandb", "peers", "stack", "aesthetics")   # <name>.md, outside this repository
NOTE_CITATION = re.compile(r"\b(?:" + "|".join(NOTES) + r")\.md\b|\bshared/" + "research\\b|(?<![\\w-])research" + "/")
TEXT_SUFFIXES = {".py", ".md", ".txt", ".json", ".csv", ".toml", ".sql", ".tcss", ".cfg", ".yml", ".yaml"}
NOT_OURS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist", "node_modules"}
REFERENCE = re.compile(r"(?<![\w/.~:-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:py|md|sql|json|tcss))(?![\w(/-])")
CODE_DIRS = ("marinctl", "repro", "tests", "bench")


def text_files() -> list[Path]:
    """Every text file of the repository (what `.gitignore` leaves: not the venv, caches, builds)."""
    out = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if (path.is_file() and path.suffix in TEXT_SUFFIXES and not NOT_OURS & set(parts)
                and not any(p.endswith(".egg-info") for p in parts) and parts[0] not in ("cache", "wandb")):
            out.append(path)
    return sorted(out)


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of what a person reads as words: a .py file's comments and docstrings; any
    other text file whole."""
    import io
    import tokenize

    text = path.read_text()
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                out += [(node.body[0].lineno + i, line) for i, line in enumerate(doc.splitlines())]
    return out


@lru_cache(maxsize=1)
def our_dirs() -> frozenset[str]:
    """Names of the folders of this repository's code: a reference starting with one is ours."""
    names = set(CODE_DIRS)
    for top in CODE_DIRS:
        names |= {p.name for p in (ROOT / top).rglob("*") if p.is_dir() and not NOT_OURS & set(p.parts)}
    return frozenset(names)


@lru_cache(maxsize=1)
def our_file_names() -> frozenset[str]:
    return frozenset(p.name for p in text_files())


def dangling(path: Path, ref: str) -> bool:
    """A reference to a file of this repository that does not exist.

    `a/b.py` is ours when `a` is one of our code folders, and it must then resolve from the
    repository root, from a folder the citing file sits in, or from `marinctl/` (`store/parts.py`).
    Any other folder is someone else's (Marin's `experiments/…`, W&B's `core/…`): not checked. A
    bare file name ending .py, .md, .sql or .tcss must be some file of ours; a bare .json name is
    often a file a program writes (`run.json`, W&B's `wandb-metadata.json`) and is not checked."""
    parts = ref.split("/")
    if len(parts) == 1:
        return not ref.endswith(".json") and ref not in our_file_names()
    if parts[0] not in our_dirs():
        return False
    bases = [ROOT, ROOT / "marinctl", *[p for p in path.parents if ROOT in p.parents or p == ROOT]]
    return not any((base / ref).exists() for base in bases)


def test_no_file_cites_the_research_notes():
    offenders = [f"{rel(path)}:{n}: {line.strip()[:100]}"
                 for path in text_files() for n, line in enumerate(path.read_text().splitlines(), 1)
                 if NOTE_CITATION.search(line)]
    assert offenders == [], "cite the upstream source the note gives, not the note:\n" + "\n".join(offenders)


OWN_ISSUE = re.compile(r"\b[Ii]ssues? \d+\b")     # this project's issues; upstream ones read marin#N or "issue #N"


def test_no_docstring_or_comment_cites_this_projects_issues():
    """Code says why in words; which issue asked for it is the commit's and bench/NOTES.md's
    business. Upstream citations (marin#8435, Marin's issue #8818) are sources and stay."""
    offenders = [f"{rel(path)}:{n}: {line.strip()[:100]}"
                 for path in text_files() if path.suffix == ".py"
                 for n, line in prose(path) if OWN_ISSUE.search(line)]
    assert offenders == [], "say why without the issue number:\n" + "\n".join(offenders)
    assert OWN_ISSUE.search("(issue " + "29 §4)") and not OWN_ISSUE.search("(issue #8818)")


def test_references_to_files_name_files_that_exist():
    offenders, checked = [], 0
    for path in text_files():
        for n, line in prose(path):
            for ref in REFERENCE.findall(line):
                checked += 1
                if dangling(path, ref):
                    offenders.append(f"{rel(path)}:{n}: {ref}")
    assert offenders == [], "references to files that are not in this repository:\n" + "\n".join(offenders)
    assert checked > 100   # the reader found the references (a guard on the reader itself)


@pytest.mark.parametrize("text, refs", [
    ("the windowed statistics run in DuckDB (store/rolling.py); see `tests/fakes/synth.py`", ["store/rolling.py", "tests/fakes/synth.py"]),
    ("Marin's `experiments/grug/moe/README.md` and allenai/OLMo-core:src/olmo_core/x.py", ["experiments/grug/moe/README.md"]),
    ("con.sql(query) and https://github.com/wandb/wandb/blob/main/core/x.md", []),
])
def test_reference_reader(text, refs):
    """What counts as a reference (a guard on the reader): paths, not a method call, a URL or an
    `owner/repo:path` citation."""
    assert REFERENCE.findall(text) == refs


@pytest.mark.parametrize("ref, gone", [
    ("store/rolling.py", False), ("analysis/detect/detectors.py", False), ("tests/fakes/synth.py", False),
    ("analysis/detectors.py", True), ("bench/proto_parts.py", True), ("proto_parts.py", True),
    ("experiments/grug/moe/README.md", False), ("run.json", False), ("STORE_DESIGN.md", True),
])
def test_dangling_reference_rule(ref, gone):
    """The rule itself, from a file in marinctl/analysis/explain/: a moved module is caught, an
    upstream path is not checked (a guard on the rule)."""
    assert dangling(ROOT / "marinctl" / "analysis" / "explain" / "explain.py", ref) is gone


def test_note_citation_pattern():
    """A guard on the pattern: each note's name is caught, a word that merely contains one is not."""
    research = "research" + "/"   # spelled apart, so this file does not cite a note itself
    for cited in (f"({NOTES[0]}.md §1.4)", f"{NOTES[2]}.md §B", f"{research}{NOTES[1]}.md §7.2", f"shared/{research}"):
        assert NOTE_CITATION.search(cited), cited
    for fine in ("facebookresearch/metaseq", "a wandb.mdx file", "README.md", "marin#8435"):
        assert not NOTE_CITATION.search(fine), fine
