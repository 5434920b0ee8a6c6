"""The layout's promise, checked from the imports: the library (initnorm/launch/, where a sweep's units run, included)
imports no command-line glue, no Hydra app code and no reproduction script, the glue imports no reproduction script and
no Hydra plugin class (hydra_plugins/ sits above it: its classes hand their work to the glue), and no module imports in
a cycle."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "initnorm"
PLUGINS = ROOT / "hydra_plugins"  # the launcher and sweeper classes Hydra must find there
SHIMS = {"train", "probe", "coord_check", "summarize", "reproduce", "bench", "diagnose", "roles"}  # `python -m initnorm.X`


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path) -> set[str]:
    """Every module name ``path`` imports, and each ``from`` import's module.name (at any depth of its code, lazy imports
    included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def imports() -> dict[str, set[str]]:
    """module -> the initnorm modules it imports (at any depth of its code, lazy imports included)."""
    paths = [*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")]
    names = {module_name(p) for p in paths}
    return {module_name(path): {n for n in imported(path) if n in names and n != "initnorm"} for path in paths}


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


# What the library may import of Hydra: ``instantiate`` (a config's ``_target_`` nodes), and the list of submitit's
# common keys in Hydra's submitit launcher's config (initnorm/launch/slurm.py). Hydra's app (its job runs, its global
# state, its plugins) is the glue's.
LIBRARY_HYDRA = {"hydra.utils", "hydra.utils.instantiate", "hydra_plugins.hydra_submitit_launcher.config",
                 "hydra_plugins.hydra_submitit_launcher.config.BaseQueueConf"}


def test_the_library_imports_nothing_of_hydras_app():
    wrong = [f"{module_name(p)} imports {n}" for p in PACKAGE.rglob("*.py") if kind(module_name(p)) == "library"
             for n in imported(p) if n.split(".")[0] in ("hydra", "hydra_plugins") and n not in LIBRARY_HYDRA]
    assert not wrong, wrong


def test_launch_holds_the_executors_and_imports_no_glue():
    """Where a sweep's units run (the executors, the worker pool, SLURM) is library: the launchers pass in what a job is."""
    graph = imports()
    launch = {m for m in graph if m.startswith("initnorm.launch")}
    assert {"initnorm.launch.executors", "initnorm.launch.pool", "initnorm.launch.workers", "initnorm.launch.slurm"} <= launch
    assert all(kind(m) == "library" for m in launch)
    wrong = [f"{m} imports {d}" for m in launch for d in graph[m] if kind(d) != "library"]
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
                       r"|data|repro|launch|search)/[\w./-]*\w\.(?:py|md|yaml|sh))")
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
    assert "initnorm.launch.slurm" in graph["hydra_plugins.initnorm_launchers._slurm"]


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
