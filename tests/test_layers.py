"""The package's layering, enforced: the internal import graph (deferred imports included) has no
cycle and no edge from a lower layer to a higher one; onnxruntime stays out of the process until a
decoder runs, and runtime/ort.py is its only importer.

The graph is read with ``ast`` from the source, so an import inside a function counts exactly like
one at module level: a deferred import hides an edge from Python's import machinery, not from the
architecture.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import onnx
import pytest

import onnx_struct
import onnx_struct.errors

PACKAGE = pathlib.Path(onnx_struct.__file__).parent
TESTS = pathlib.Path(__file__).parent
ROOT = "onnx_struct"

# Lowest first; a module may import its own layer and the layers before it.
LAYERS = (
    ("foundation", ("errors", "limits", "originals", "_proto", "_version")),
    ("schema", ("schema",)),
    ("layout", ("layout",)),
    ("formats", ("formats",)),
    ("payload", ("payload",)),
    ("functions", ("functions",)),
    ("check", ("check",)),
    ("lowering", ("lowering",)),
    ("runtime", ("runtime",)),
    ("passes", ("passes",)),
    ("ecosystem", ("ecosystem",)),  # neighbouring tools adapted to keep struct parts (docs/ecosystem.md)
    ("tools", ("tools",)),
    ("llm", ("llm",)),
    ("convert", ("convert",)),  # GGUF files in and out; from-gguf --graph builds llm.graph
    ("conformance", ("conformance",)),  # the suite for runtime authors: check, payload, lowering, runtime
    ("cli", ("cli",)),
    ("facade", ("", "__main__")),  # "" is onnx_struct/__init__.py
)


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {name for name, p in MODULES.items() if p.name == "__init__.py"}


def layer_of(module: str) -> int:
    rest = module.split(".")[1:]
    top = rest[0] if rest else ""
    for index, (_, tops) in enumerate(LAYERS):
        if top in tops:
            return index
    raise AssertionError(f"{MODULES[module]}: module {module} is in no layer; add it to LAYERS")


def layer_name(module: str) -> str:
    return LAYERS[layer_of(module)][0]


def resolve(importer: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package modules the statement imports (an imported name that is a submodule counts as
    that submodule; one that is an attribute counts as its module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == ROOT]
    base = node.module or ""
    if node.level:
        package = importer if importer in PACKAGES else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    if base.split(".")[0] != ROOT:
        return []
    targets = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        targets.append(submodule if submodule in MODULES else base)
    return targets


def with_parents(importer: str, target: str) -> list[str]:
    """``target`` and the packages Python runs to reach it: importing onnx_struct.formats.base runs
    onnx_struct/formats/__init__.py first. The root package and the importer's own packages are
    left out (they are already being imported when the importer runs)."""
    chain = [target]
    parent = target.rpartition(".")[0]
    while parent and parent != ROOT:
        if not (importer == parent or importer.startswith(parent + ".")):
            chain.append(parent)
        parent = parent.rpartition(".")[0]
    return chain


def import_graph() -> dict[tuple[str, str], str]:
    """(importer, imported) -> "file:line" of the first statement making the edge."""
    edges: dict[tuple[str, str], str] = {}
    for importer, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in resolve(importer, node):
                    assert target in MODULES, f"{path}:{node.lineno}: imports {target}, which does not exist"
                    for imported in with_parents(importer, target):
                        if imported != importer:
                            where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                            edges.setdefault((importer, imported), where)
    return edges


def upward_edges(edges: dict[tuple[str, str], str]) -> list[str]:
    return [
        f"{where}: {a} ({layer_name(a)}) imports {b} ({layer_name(b)}), a higher layer"
        for (a, b), where in sorted(edges.items(), key=lambda item: item[1])
        if layer_of(b) > layer_of(a)
    ]


def cycles(edges: dict[tuple[str, str], str]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), as a closed path."""
    successors: dict[str, list[str]] = {m: [] for m in MODULES}
    for a, b in edges:
        successors[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in successors[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in MODULES:
        if v not in index:
            connect(v)
    return [closed_path(sorted(c), successors) for c in components]


def closed_path(component: list[str], successors: dict[str, list[str]]) -> list[str]:
    """One cycle through the component's first module (breadth-first, so the shortest)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in successors[v]:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if w in members and w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def describe_cycle(path: list[str], edges: dict[tuple[str, str], str]) -> str:
    steps = "\n".join(f"    {edges[(a, b)]}: {a} -> {b}" for a, b in zip(path, path[1:], strict=False))
    return f"cycle {' -> '.join(path)}:\n{steps}"


# ---------------------------------------------------------------------- the graph
def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_goes_up_a_layer():
    problems = upward_edges(import_graph())
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_no_import_cycle():
    edges = import_graph()
    problems = [describe_cycle(path, edges) for path in cycles(edges)]
    assert not problems, "import cycles:\n" + "\n".join(problems)


def test_the_checks_catch_a_bad_edge_and_a_cycle():
    """The checks against a hand-made graph: one upward edge and one two-module cycle."""
    edges = {
        ("onnx_struct.schema.model", "onnx_struct.payload.external"): "onnx_struct/schema/model.py:70",
        ("onnx_struct.check.checker", "onnx_struct.check.inference"): "onnx_struct/check/checker.py:1",
        ("onnx_struct.check.inference", "onnx_struct.check.checker"): "onnx_struct/check/inference.py:2",
        ("onnx_struct.formats", "onnx_struct.passes.quantize"): "onnx_struct/formats/__init__.py:56",
    }
    assert upward_edges(edges) == [
        "onnx_struct/formats/__init__.py:56: onnx_struct.formats (formats) imports "
        "onnx_struct.passes.quantize (passes), a higher layer",
        "onnx_struct/schema/model.py:70: onnx_struct.schema.model (schema) imports "
        "onnx_struct.payload.external (payload), a higher layer",
    ]
    (path,) = cycles(edges)
    assert describe_cycle(path, edges) == (
        "cycle onnx_struct.check.checker -> onnx_struct.check.inference -> onnx_struct.check.checker:\n"
        "    onnx_struct/check/checker.py:1: onnx_struct.check.checker -> onnx_struct.check.inference\n"
        "    onnx_struct/check/inference.py:2: onnx_struct.check.inference -> onnx_struct.check.checker"
    )


def test_the_reader_sees_every_import_spelling(tmp_path):
    """Deferred, relative, ``from package import submodule`` and ``import a.b`` all make edges."""
    source = textwrap.dedent(
        """
        import onnx_struct.schema.wire
        from onnx_struct import limits
        from onnx_struct.layout.table import size_in_bits
        from . import builders
        from ..payload import view
        def later():
            from onnx_struct.formats.base import register
        """
    )
    tree = ast.parse(source)
    importer = "onnx_struct.schema.model"
    found = [
        t for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom) for t in resolve(importer, node)
    ]
    assert sorted(found) == sorted(
        [
            "onnx_struct.schema.wire",
            "onnx_struct.limits",
            "onnx_struct.layout.table",
            "onnx_struct.schema.builders",
            "onnx_struct.payload.view",
            "onnx_struct.formats.base",
        ]
    )
    assert with_parents(importer, "onnx_struct.formats.base") == ["onnx_struct.formats.base", "onnx_struct.formats"]
    assert with_parents(importer, "onnx_struct.schema.wire") == ["onnx_struct.schema.wire"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_schema_reads_model_files_with_payloads_reader(tmp_path):
    """schema.model.load reads a path with payload/external.py's reader (handed down at import,
    since schema may not import payload): a FIFO is refused unopened, as every file read is."""
    from onnx_struct.payload import external
    from onnx_struct.schema import model

    assert model._read_model_file is external.read_model_file
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    with pytest.raises(onnx_struct.errors.NotRegularFileError):
        model.load(fifo)


# ---------------------------------------------------------------------- onnxruntime
def test_only_runtime_ort_imports_onnxruntime():
    importers = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(name.split(".")[0] == "onnxruntime" for name in names):
                importers.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert {i.rpartition(":")[0] for i in importers} == {"onnx_struct/runtime/ort.py"}, importers


# Registered first, so it runs last: the modules the process held when it ended, whatever imported
# them (import statements, importlib, __import__).
REPORT_MODULES = "import atexit, sys; atexit.register(lambda: print('MODULES', *sorted(sys.modules), file=sys.stderr))"


def imported_modules(code: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``code`` in a fresh Python; its result and the modules it had imported by its exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), str(TESTS)])}
    program = f"{REPORT_MODULES}\n{code}"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = [line for line in result.stderr.splitlines() if line.startswith("MODULES ")]
    modules = set(report.split()[1:])
    assert "onnx_struct" in modules, "the report is empty: the atexit hook did not run"
    return result, modules


@pytest.mark.slow
def test_import_onnx_struct_leaves_onnxruntime_out():
    _, modules = imported_modules("import onnx_struct")
    assert "onnxruntime" not in modules


@pytest.mark.slow
def test_import_onnx_struct_imports_only_the_facades_foundation(tmp_path):
    # and what the foundation installs on import is in place: load_model reads a file with
    # payload's reader (a FIFO refused unopened), a recorded link is admitted by file_identity
    onnx.save(onnx.ModelProto(ir_version=10), tmp_path / "m.onnx")
    code = (
        "import onnx_struct, sys\n"
        f"onnx_struct.load_model({str(tmp_path / 'm.onnx')!r})\n"
        "print(sys.modules['onnx_struct.payload.external']._admits_link.__module__)"
    )
    result, modules = imported_modules(code)
    assert result.stdout.split() == ["onnx_struct.payload.file_identity"]
    ours = {m for m in modules if m.startswith("onnx_struct.")}
    assert not {m for m in ours if m.split(".")[1] in ("check", "lowering", "passes", "runtime", "llm")}, ours


@pytest.mark.slow
def test_a_cached_start_imports_no_checker_lowering_or_quantize(tmp_path):
    # A Generator over a cache hit loads onnxruntime's saved graph: the check, the lowering, the
    # repacking (runtime/session_build.py) and quantize are what a miss runs, not imported here.
    import onnx  # noqa: PLC0415
    from support.llm import TinyLlama, spm_vocab, write_gguf  # noqa: PLC0415

    from onnx_struct.convert import convert  # noqa: PLC0415

    write_gguf(tmp_path / "model.gguf", TinyLlama(**spm_vocab(), seed=7))
    onnx.save(convert(tmp_path / "model.gguf", graph=True, reference=True), tmp_path / "model.onnx")
    start = (
        "import json\nfrom onnx_struct.llm.generation import Generator\n"
        f"g = Generator({str(tmp_path / 'model.onnx')!r}, cache_dir={str(tmp_path / 'cache')!r})\n"
        "print(json.dumps(g.generate([1, 17, 42], max_new_tokens=3, stop_at_eos=False).tokens))"
    )
    miss, missed = imported_modules(start)
    hit, modules = imported_modules(start)
    assert hit.stdout == miss.stdout and len(json.loads(hit.stdout)) == 3
    parts = ("check", "lowering.lower", "lowering.execution", "passes", "functions", "runtime.session_build")
    heavy = tuple(f"onnx_struct.{part}" for part in parts)
    assert not {m for m in modules if m.startswith(heavy)}
    assert "onnx_struct.runtime.session_build" in missed  # the first start made the entry: a miss
    # The CLI builds only the parser of the command it runs: not the checker for check's options.
    argv = ["generate", str(tmp_path / "model.onnx"), "--prompt", "ab", "--cache-dir", str(tmp_path / "cache")]
    code = f"import runpy, sys; sys.argv[1:] = {argv!r}; runpy.run_module('onnx_struct', run_name='__main__')"
    _, modules = imported_modules(code)
    assert not {m for m in modules if m.startswith(heavy)}


@pytest.mark.slow
def test_lower_leaves_onnxruntime_out():
    code = (
        "import onnx, onnx_struct.lowering.lower, onnx_struct; from support.models import linear_model\n"
        "lowered = onnx_struct.lower(linear_model(bytes(64)))\n"
        "onnx.checker.check_model(lowered, full_check=True)\n"
        "print(*[node.op_type for node in lowered.graph.node], *[f.name for f in lowered.functions])"
    )
    result, modules = imported_modules(code)
    assert "onnxruntime" not in modules
    # A call of the decoder, the model's own nodes, and the decoder as a local function.
    assert result.stdout.split() == ["linear", "Add", "Relu", "linear"], result.stdout


@pytest.mark.slow
def test_cli_help_leaves_onnxruntime_out():
    # What ``python -m onnx_struct --help`` runs (runpy is how -m runs a module).
    code = "import runpy, sys; sys.argv[1:] = ['--help']; runpy.run_module('onnx_struct', run_name='__main__', alter_sys=True)"
    result, modules = imported_modules(code)
    assert "usage: onnx-struct" in result.stdout
    assert "onnxruntime" not in modules
    assert "onnx_struct.cli.decode" in modules  # every subcommand's parser was built


# ---------------------------------------------------------------------- bounds
LIMITS = PACKAGE / "limits.py"


def module_bounds(source: str) -> list[tuple[int, str]]:
    """Module-level ``MAX_*`` names given a value: a bound declared outside limits.py."""
    found = []
    for node in ast.parse(source).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Name) and target.id.lstrip("_").startswith("MAX_"):
                found.append((node.lineno, target.id))
    return found


def test_every_bound_is_in_limits():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in MODULES.values()
        if path != LIMITS
        for line, name in module_bounds(path.read_text())
    ]
    assert not found, "bounds outside onnx_struct/limits.py:\n" + "\n".join(found)
    assert module_bounds("MAX_X = 1\n_MAX_Y: int = 2\nMIN_Z = 3\ndef f():\n    MAX_W = 4\n") == [
        (1, "MAX_X"),
        (2, "_MAX_Y"),
    ]


def test_every_limit_is_documented():
    """limits.py's promise: a limit changed there is changed in docs/security.md's table."""
    tree = ast.parse(LIMITS.read_text())
    names = {
        t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
    }
    assert "MAX_LEAVES" in names and "SESSION_CACHE_SIZE" in names
    security = (PACKAGE.parent / "docs" / "security.md").read_text()
    missing = sorted({name for name in names if f"`{name}`" not in security})
    assert not missing, f"limits without a row in docs/security.md: {missing}"
