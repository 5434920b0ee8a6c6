"""The layout's promise, checked from the imports: the library imports no command-line glue and no
reproduction script, the glue imports no reproduction script and no Hydra plugin class (hydra_plugins/
sits above it: its classes hand their work to the glue), and no module imports in a cycle."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "initnorm"
PLUGINS = ROOT / "hydra_plugins"  # the launcher and sweeper classes Hydra must find there
SHIMS = {"train", "probe", "coord_check", "summarize", "reproduce", "bench", "diagnose", "roles"}  # `python -m initnorm.X`


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """module -> the initnorm modules it imports (at any depth of its code, lazy imports included)."""
    graph: dict[str, set[str]] = {}
    paths = [*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")]
    names = {module_name(p) for p in paths}
    for path in paths:
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        graph[module_name(path)] = {n for n in found if n in names and n != "initnorm"}
    return graph


def kind(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "hydra_plugins":
        return "plugins"
    if len(parts) == 2 and parts[1] in SHIMS:
        return "shim"
    return {"cli": "cli", "repro": "repro"}.get(parts[1] if len(parts) > 1 else "", "library")


def test_library_imports_no_glue_and_glue_no_scripts():
    allowed = {"library": {"library"}, "cli": {"library", "cli"}, "plugins": {"library", "cli", "plugins"},
               "repro": {"library", "cli", "repro"}, "shim": {"cli", "repro"}}
    wrong = [f"{m} ({kind(m)}) imports {d} ({kind(d)})" for m, deps in imports().items() for d in deps if kind(d) not in allowed[kind(m)]]
    assert not wrong, wrong


def test_no_import_cycles():
    graph = imports()
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path + [m, d]
            if d not in state and (cycle := visit(d, path + [m])):
                return cycle
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m, [])
            assert cycle is None, " -> ".join(cycle)


def test_no_comment_or_document_names_a_file_that_does_not_exist():
    """Paths named in code, comments and documents (``training/resume.py``, ``docs/vectorized.md``) exist
    (results/ records what ran then, and is left out)."""
    import re
    import subprocess

    named = re.compile(r"(?<![\w./<-])((?:initnorm|tests|scripts|bench|docs|conf|hydra_plugins|training|callbacks|cli|instruments|models|nn"
                       r"|data|repro)/[\w./-]*\w\.(?:py|md|yaml|sh))")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    missing = []
    for f in tracked:
        if not f.endswith((".py", ".md", ".yaml", ".toml")) or f.startswith("results/"):
            continue
        for m in named.finditer((ROOT / f).read_text(encoding="utf-8", errors="ignore")):
            p = m.group(1)
            if not any((base / p).exists() for base in (ROOT, ROOT / "initnorm", ROOT / "conf" / "..")):
                missing.append(f"{f}: {p}")
    assert not missing, missing


def test_the_graph_holds_the_plugin_classes():
    graph = imports()
    assert {"hydra_plugins.initnorm_launchers", "hydra_plugins.initnorm_launchers._slurm",
            "hydra_plugins.initnorm_vectorized.vectorized_launcher"} <= set(graph)
    assert "initnorm.cli.slurm" in graph["hydra_plugins.initnorm_launchers._slurm"]


def test_an_environment_variables_name_is_written_once():
    """Every ``INITNORM_*`` name is a constant of initnorm/envvars.py, read from there (the workers, the jobs, a SLURM
    task and the parent must agree on it; copies were kept equal by a test)."""
    import re

    written = {}
    for path in [*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"INITNORM_[A-Z_]*", node.value):
                written.setdefault(node.value, []).append(path.relative_to(ROOT).as_posix())
    assert written and all(where == ["initnorm/envvars.py"] for where in written.values()), written
