"""The layout rules of the package, read from the source with ``ast`` (imports inside function
bodies included): the packages in one layer order, each importing only the layers below it (and
itself); no import cycle; the core never imports pyspark; every module opens with a docstring
that says what it owns and stays short enough to read whole; no folder grows past a dozen modules.
The order is stated once, here, and in ``docs/design.md`` (section 2, Architecture)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "bpe_spark"
MAX_LINES = 500
MAX_MODULES = 12  # per folder, not counting __init__ and __main__

# The layers, lowest first: a module may import its own layer and the layers before it. A module
# belongs to the longest prefix that names it.
LAYERS = (
    "bpe_spark._version",
    "bpe_spark.errors",
    "bpe_spark.native",  # the C sources and their loader
    "bpe_spark.bpe",  # the algorithm's parts, no I/O
    "bpe_spark.storage",  # file systems, URIs, the output guard
    "bpe_spark.pipeline",  # imported tokenizers' steps
    "bpe_spark.models",  # model files
    "bpe_spark.datasets",  # encoded-data files
    "bpe_spark.encoding",  # Tokenizer, the batch encoder
    "bpe_spark.training",  # the merge engine, train, rounds' planning
    "bpe_spark.inspect",  # statistics, summary, report
    "bpe_spark.spark.options",
    "bpe_spark.spark.runtime",
    "bpe_spark.spark.storage",
    "bpe_spark.spark.read",
    "bpe_spark.spark.training",
    "bpe_spark.spark.encoding",
    "bpe_spark.spark.ml",
    "bpe_spark.spark",  # the package's lazy exports
    "bpe_spark.cli",
    "bpe_spark",  # the public API
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> set[str]:
    """The modules of bpe_spark that ``name`` imports anywhere in its source."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package
                base = name if _is_package(name) else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            targets = []
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                targets.append(sub if sub in MODULES else module)
        else:
            continue
        for target in targets:
            # `import a.b.c` names a.b.c; keep the longest prefix that is one of our modules
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), as sorted lists."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_walker_sees_function_local_imports():
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _cycles(graph) == [["a", "b"]]
    # a real module of ours that imports lazily, inside a function: the edge is seen
    lazy = [name for name, path in MODULES.items() if "\n    from bpe_spark" in path.read_text(encoding="utf-8")]
    assert lazy, "expected at least one function-local import to check the walker on"
    assert all(GRAPH[name] for name in lazy)


def _layer(name: str) -> int:
    best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len)
    return LAYERS.index(best)


def test_every_module_has_a_layer():
    # bpe_spark itself is the last layer; a new top-level package must be placed in LAYERS
    loose = [n for n in MODULES if n != "bpe_spark" and _layer(n) == LAYERS.index("bpe_spark")]
    assert not loose, f"modules in no layer (add their package to LAYERS): {loose}"


def test_imports_only_go_down_the_layers():
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if _layer(target) > _layer(name)
    )
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import():
    assert _layer("bpe_spark.bpe.words") < _layer("bpe_spark.encoding.tokenizer")
    assert _layer("bpe_spark.spark.encoding.tasks") > _layer("bpe_spark.spark.read.jsonl")
    assert _layer("bpe_spark.spark") > _layer("bpe_spark.spark.ml")


@pytest.mark.parametrize("package", ["bpe_spark", "bpe_spark.spark"])
def test_no_module_shadows_a_public_name(package):
    """A subpackage or module named as a public function (``bpe_spark.spark.encode``) would replace
    the function on the package once anything imports the module."""
    exported = set(importlib.import_module(package).__all__)
    children = {name.rpartition(".")[2] for name in MODULES if name.rpartition(".")[0] == package}
    assert not exported & children, f"{package}: modules named as public names: {sorted(exported & children)}"


def test_folders_stay_small():
    crowded = {}
    for folder in {path.parent for path in MODULES.values()}:
        modules = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        if len(modules) > MAX_MODULES:
            crowded[str(folder.relative_to(PACKAGE.parent))] = len(modules)
    assert not crowded, f"folders of more than {MAX_MODULES} modules (split them by job): {crowded}"


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    detail = "; ".join(
        " <-> ".join(group) + " (" + ", ".join(f"{a}->{b}" for a in group for b in sorted(GRAPH[a]) if b in group) + ")"
        for group in cycles
    )
    assert not cycles, f"import cycles: {detail}"


def test_core_never_imports_pyspark():
    offenders = []
    for name, path in MODULES.items():
        if name.startswith(("bpe_spark.spark", "bpe_spark.cli")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n == "pyspark" or n.startswith(("pyspark.", "bpe_spark.spark")) for n in names):
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, f"core modules import Spark: {offenders}"


def test_core_and_cli_help_run_without_pyspark():
    """At run time too: training, encoding and every ``bpe-spark --help`` load no pyspark."""
    code = (
        "import contextlib, io, sys\n"
        "import bpe_spark, bpe_spark.training.trainer, bpe_spark.encoding.tokenizer, bpe_spark.models.load, bpe_spark.cli\n"
        "from bpe_spark import TrainerConfig, train\n"
        "tok = train(['hello world'], TrainerConfig(vocab_size=260))\n"
        "assert tok.decode(tok.encode('hello')) == 'hello'\n"
        "for name in [None, 'train', 'count', 'encode', 'decode', 'inspect', 'export', 'evaluate']:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        bpe_spark.cli.main([name, '--help'] if name else ['--help'])\n"
        "bad = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.'))\n"
        "assert not bad, bad\n"
        "print('clean')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_short_and_says_what_it_owns(name):
    source = MODULES[name].read_text(encoding="utf-8")
    lines = source.count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it (the limit is {MAX_LINES})"
    docstring = ast.get_docstring(ast.parse(source))
    assert docstring and len(docstring.split()) >= 5, f"{name} needs an opening docstring saying what it owns"
