"""The import rules of docs/architecture.md, read from the source: imports run one way (tests, bench → devtools →
actors → app → adapters, schemas; inside app, access → credentials → catalog; the provider-compatible APIs
(app/compat, app/api/compat) on top of the engine, which never imports them), the runtime packages never import
the scaffolding (devtools, tests, bench) nor a package they sit in, the foundation (runtime, db, errors, redaction)
imports no package of app, the bench never imports tests, and no two modules import each other, directly or round
a loop, even from inside a function or behind TYPE_CHECKING."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ("app", "actors", "adapters", "schemas")  # what the image ships and requirements.txt serves
SCAFFOLDING = ("devtools", "tests", "bench")  # the demo and test scaffolding, the tests, the benchmarks
# What every process builds first; the domain packages (observability, batches, ...) import it, never the reverse.
FOUNDATION = ("app.runtime", "app.db", "app.errors", "app.redaction")
PACKAGES = RUNTIME + SCAFFOLDING
COMPAT = ("app.compat", "app.api.compat")  # the OpenAI- and Anthropic-compatible batch APIs
# who may import them: themselves, the blueprints that route to them, and the boot wiring that registers them
COMPAT_USERS = ("app.compat", "app.api", "app.wiring")
# The engine and the observability reach the queue through ports (app/batches/publisher.py, app/queue_port.py); the
# queue's libraries are for actors/ and the backends' own modules.
QUEUE_LIBRARIES = ("pika", "dramatiq")
QUEUE_NEUTRAL = ("app.batches", "app.observability")
# Package-level import edges still allowed to close a loop, each with the change that removes it (none left).
PACKAGE_LOOPS_ALLOWED: set[tuple[str, str]] = set()


def _modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules NAME imports anywhere in its file (a `from x import y` of a submodule counts as x.y)."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up LEVEL - 1 packages from this one
                parents = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parents + ([base] if base else []))
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in out if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _top(module: str, depth: int = 1) -> str:
    return ".".join(module.split(".")[:depth])


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def _wrong_way(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    wrong = []
    for module, targets in graph.items():
        for target in targets:
            if _within(target, COMPAT) and _top(module) in RUNTIME and not _within(module, COMPAT_USERS):
                wrong.append((module, target))
            if _top(module) == "app" and _top(target) == "actors":
                wrong.append((module, target))
            if _top(module) in RUNTIME and _top(target) in SCAFFOLDING:
                wrong.append((module, target))
            if (_top(module), _top(target)) in (("bench", "tests"), ("devtools", "tests"), ("devtools", "bench")):
                wrong.append((module, target))
            if _back_up(graph, module, target):
                wrong.append((module, target))
            if module in FOUNDATION and target.count(".") > 1:  # into a package of app (app.observability.logs)
                wrong.append((module, target))
            if _top(module) in ("adapters", "schemas") and _top(target) in ("app", "actors"):
                wrong.append((module, target))
            for lower, higher in (("app.catalog", "app.credentials"), ("app.catalog", "app.access"),
                                  ("app.credentials", "app.access")):
                if module.startswith(lower + ".") and (target == higher or target.startswith(higher + ".")):
                    wrong.append((module, target))
    return sorted(wrong)


def _back_up(graph: dict[str, set[str]], module: str, target: str) -> bool:
    """MODULE imports TARGET, a package it sits in, whose __init__ imports down into MODULE's branch (app.api.server
    importing `app`, which imports app.api): a loop between a package and its parts that no cycle check sees."""
    if not module.startswith(target + "."):
        return False
    branch = ".".join(module.split(".")[:len(target.split(".")) + 1])
    return any(t == branch or t.startswith(branch + ".") for t in graph.get(target, ()))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + "."):
                continue  # a package's __init__ importing its own submodules is not a loop
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_the_layers_import_one_way() -> None:
    graph = _graph()
    assert len(graph) > 100, "the project's modules were not found"
    assert not _wrong_way(graph), f"imports against the layering: {_wrong_way(graph)}"


def test_the_runtime_packages_import_nothing_of_the_scaffolding() -> None:
    graph = _graph()
    assert any(_top(m) == "devtools" for m in graph) and any(_top(m) == "bench" for m in graph)
    found = [(m, t) for m, targets in graph.items() for t in targets
             if (_top(m) in RUNTIME and _top(t) in SCAFFOLDING) or (_top(m) == "bench" and _top(t) == "tests")]
    assert not found, f"the product (or the bench) imports the scaffolding: {found}"


def test_the_runtime_packages_import_only_what_requirements_txt_installs() -> None:
    installed = _runtime_distributions()
    assert "flask" in installed and "aiohttp" not in installed and "pytest" not in installed
    owners = packages_distributions()
    outside = {}
    for name, path in _modules(RUNTIME).items():
        for top in _third_party_imports(path):
            dists = {_normal(d) for d in owners.get(top, [top])}
            if not dists & installed:
                outside[f"{name}: {top}"] = sorted(dists)
    assert not outside, f"imported by the runtime but not installed by requirements.txt: {outside}"


def _runtime_distributions() -> set[str]:
    """requirements.txt's distributions and everything they require (with the extras asked for), normalised."""
    todo = [Requirement(line) for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith(("#", "-"))]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        if _normal(req.name) in seen:
            continue
        seen.add(_normal(req.name))
        for text in distribution(req.name).requires or []:
            dep = Requirement(text)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in req.extras or {""}):
                todo.append(Requirement(f"{dep.name}[{','.join(dep.extras)}]" if dep.extras else dep.name))
    return seen


def _third_party_imports(path: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            tops.add(node.module.split(".")[0])
    return {t for t in tops if t not in sys.stdlib_module_names and t not in PACKAGES}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_engine_never_reaches_the_compatible_apis_through_any_chain_of_imports() -> None:
    graph = _graph()
    engine = [m for m in graph if not _within(m, ("app.api", "app.compat", "app.commands", "app.cli", "app.wiring"))
              and _top(m) == "app" and m != "app"]  # app.wiring: the boot wiring, plugging compat into the engine
    assert "app.batches.service" in engine and "app.batches.finals" in engine and "app.webhooks.events" in engine
    reaching = {m: sorted(t for t in _reachable(graph, m) if _within(t, COMPAT)) for m in engine}
    wrong = {m: found for m, found in reaching.items() if found}
    assert not wrong, f"engine modules that reach app.compat: {wrong}"


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """App's package-level import graph: a node per package or top-level module of app (app.batches, app.settings),
    an edge where any module of one imports any module of another (less PACKAGE_LOOPS_ALLOWED)."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if _top(module) != "app" or module == "app":
            continue
        node = packages.setdefault(_top(module, 2), set())
        node |= {_top(t, 2) for t in targets if _top(t) == "app" and t != "app" and _top(t, 2) != _top(module, 2)}
    for node, targets in packages.items():
        targets -= {t for t in targets if (node, t) in PACKAGE_LOOPS_ALLOWED}
        for target in targets:
            packages.setdefault(target, set())
    return packages


def test_no_import_cycles_between_the_packages_of_app() -> None:
    packages = _package_graph(_graph())
    assert {"app.batches", "app.usage", "app.webhooks", "app.catalog", "app.observability", "app.settings"} <= set(
        packages)
    cycles = _cycles(packages)
    assert not cycles, "package-level import cycles:\n" + "\n".join(" → ".join(c) for c in cycles)


def test_the_engine_and_the_observability_import_no_queue_library() -> None:
    found = {name: sorted(_third_party_imports(path) & set(QUEUE_LIBRARIES))
             for name, path in _modules(("app",)).items() if _within(name, QUEUE_NEUTRAL)}
    assert "app.batches.dispatch" in found and "app.observability.scrape" in found
    wrong = {name: tops for name, tops in found.items() if tops}
    assert not wrong, f"the queue's libraries are for actors/ and the queue backends (use the ports): {wrong}"


def _private_imports(path: Path) -> set[str]:
    """The `_private` names PATH takes from another module of the project (`from app.x import _helper`)."""
    return {f"{node.module}.{alias.name}" for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")}


def test_the_runtime_packages_never_import_another_modules_private_names() -> None:
    """A helper another module needs is public (the compatible APIs once read the intake's `_decode` and `_skip`)."""
    wrong = {name: sorted(found) for name, path in _modules(RUNTIME).items() if (found := _private_imports(path))}
    assert not wrong, f"import public names only (make the helper public where it is shared): {wrong}"


def test_the_private_import_check_sees_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from app.batches.intake import parse_batch, _decode\n")
    assert _private_imports(sample) == {"app.batches.intake._decode"}


def test_a_worker_process_and_the_cli_load_no_flask() -> None:
    """The app factory is app.api.factory's, not the `app` package's: the modules a worker process boots from
    (actors.worker itself builds a broker on import) and the `relay` command import neither Flask nor the API's
    schema tools (about 0.15 s of CPU at every start of either)."""
    modules = ("actors.boot, actors.broker, actors.publisher, app.cli, app.commands.server, app.wiring,"
               " app.batches.messages")
    code = (f"import sys, {modules}; print(sorted({{m.split('.')[0] for m in sys.modules}}"
            " & {'flask', 'flask_smorest', 'werkzeug', 'webargs', 'apispec'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_each_command_registers_in_the_module_the_cli_names_for_it() -> None:
    """app.cli.COMMANDS, which lets a command import its own module only, names every command where it is made."""
    import argparse
    import importlib

    from app.cli import COMMANDS

    made = {}
    for name in set(COMMANDS.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        made |= dict.fromkeys(sub.choices, name)
    assert made == COMMANDS


def test_a_command_loads_only_what_its_own_module_needs() -> None:
    """`relay batches ...` is an HTTP client: its parser loads neither psycopg nor the engine; `relay api` re-executes
    itself under gevent before it runs, so its first interpreter loads neither psycopg nor pika (about 0.3 s of CPU
    each); `relay --help` still lists every command."""
    code = ("import sys; from app.cli import build_parser; build_parser(sys.argv[1:]);"
            " print(sorted({m.split('.')[0] for m in sys.modules} & {'psycopg', 'pika', 'dramatiq', 'flask'}),"
            " 'app.batches.lifecycle' in sys.modules)")
    for argv, loaded in ((["batches", "status", "x"], "[] False"), (["api"], "[] False"),
                         (["worker"], "[] False"), (["keys", "list"], "['psycopg'] False")):
        out = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == loaded, argv
    out = subprocess.run([sys.executable, "-m", "app.cli", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert all(command in out.stdout for command in ("migrate", "worker", "apply", "tokens", "admin-batches"))


def test_no_import_cycles_between_modules() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" → ".join(c) for c in cycles)


def test_the_checks_see_a_loop_through_a_function_level_import_and_a_wrong_way_import(tmp_path: Path) -> None:
    sources = {"app": "def register():\n    from app.api import health\n",
               "app.catalog.x": "from app.credentials import y\n",
               "app.credentials.y": "def f():\n    import app.catalog.x\n",
               "app.batches.z": "from actors.boot import thing\nfrom app.compat.views import openai_batch\n",
               "app.api.w": "def load():\n    from app import create_app\n",
               "app.commands.t": "from app import create_app\n",
               "app.runtime": "from app.observability.logs import register_secrets\n",
               "app.pipeline.v": "from devtools.fake_upstream import state\n",
               "bench.u": "from tests.processes import free_port\n"}
    known = set(sources) | {"actors.boot", "app.api.health", "app.observability.logs", "devtools.fake_upstream.state",
                            "tests.processes", "app.compat.views"}
    graph = {}
    for name, text in sources.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        graph[name] = _imports(name, path, known)
    graph |= {name: set() for name in known - set(sources)}
    assert graph["app.catalog.x"] == {"app.credentials.y"} and graph["app.credentials.y"] == {"app.catalog.x"}
    assert _cycles(graph) == [["app.catalog.x", "app.credentials.y", "app.catalog.x"]]
    assert _cycles(_package_graph(graph)) == [["app.catalog", "app.credentials", "app.catalog"]]
    assert _wrong_way(graph) == [("app.api.w", "app"), ("app.batches.z", "actors.boot"),
                                 ("app.batches.z", "app.compat.views"),
                                 ("app.catalog.x", "app.credentials.y"),
                                 ("app.pipeline.v", "devtools.fake_upstream.state"),
                                 ("app.runtime", "app.observability.logs"), ("bench.u", "tests.processes")]
    assert _reachable(graph, "app.catalog.x") == {"app.catalog.x", "app.credentials.y"}


def test_tracing_off_never_imports_the_opentelemetry_sdk() -> None:
    """The SDK and its exporter load only when OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on: a process with tracing
    off imports the whole pipeline, the API, the batch runner and the actors' modules, starts spans, and has loaded
    none of it (checked in a fresh interpreter, against the same code with tracing on)."""
    import subprocess

    script = ("import sys\n"
              "import app, app.pipeline, app.batches.messages, app.batches.dispatch, app.webhooks.delivery\n"
              "from app.observability.tracing import Tracing\n"
              "tracing = Tracing.from_env(dict(TRACING_ENV))\n"
              "with tracing.span('x') as span, tracing.linked_root('y', None):\n"
              "    span.set_attribute('a', 1)\n"
              "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('opentelemetry')}))\n")
    loaded = {}
    for name, env in (("off", {}), ("on", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})):
        out = subprocess.run([sys.executable, "-c", script.replace("TRACING_ENV", repr(env))], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        loaded[name] = out.stdout.strip()
    assert loaded == {"off": "[]", "on": "['opentelemetry']"}
