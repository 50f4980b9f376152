"""The layer rule: ``lab`` -> ``mrcswitch`` -> ``mrcnic``, and inside ``mrcnic`` each layer
imports only the layers below it. Every import counts, including those inside functions
(which is where circles used to hide), so the walk is over the AST, not over what a plain
``import`` happens to load.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Packages from the bottom up: a module may import its own package and anything earlier.
PACKAGES = ("mrcnic", "mrcswitch", "lab")

# Inside mrcnic, from the bottom up. A name is a module or subpackage of mrcnic; the
# package's own __init__ (the user API) sits on top.
MRCNIC_LAYERS = (
    ("errors", "units", "_mrcfast"),
    ("optional",),  # the optional packages and the extras that bring them
    ("cliflags",),  # the flags and exit statuses every command line shares
    ("faultplan",),
    ("fast",),
    ("wire",),
    ("workloads",),  # what each shared workload is (the lab's and the simulator's)
    ("transport",),
    ("rocev2",),
    ("plugins",),
    ("sim",),
    ("profiles", "verbs"),
    ("io",),
    ("__init__",),
)

# Inside lab, from the bottom up: each floor a subpackage (or, on top, the command lines).
LAB_LAYERS = (
    ("fabric",),
    ("proc",),
    ("views",),
    ("workloads",),
    ("cli", "bench_cli", "demo", "soak", "fuzz", "__init__"),
)


def _modules() -> list[Path]:
    out: list[Path] = []
    for pkg in PACKAGES:
        out.extend(sorted((ROOT / pkg).rglob("*.py")))
    return out


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts)


def _imports(path: Path, name: str) -> list[tuple[int, str]]:
    """Every module an import statement in ``path`` (module ``name``) names, absolute, with
    its line."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    if is_pkg:
        here = here[:-1]  # "pkg.__init__" -> the package "pkg"
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            # "from pkg import sub" names the submodule sub, "from mod import x" the module
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((node.lineno, sub if _is_module(sub) else mod))
    return out


def _is_module(mod: str) -> bool:
    base = ROOT.joinpath(*mod.split("."))
    if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
        return True
    return any(base.parent.glob(base.name + ".*.so"))  # a compiled extension


def _package_rank(mod: str) -> int | None:
    top = mod.split(".")[0]
    return PACKAGES.index(top) if top in PACKAGES else None


def _mrcnic_rank(mod: str) -> int | None:
    parts = mod.split(".")
    if parts[0] != "mrcnic":
        return None
    part = parts[1] if len(parts) > 1 else "__init__"
    for rank, names in enumerate(MRCNIC_LAYERS):
        if part in names:
            return rank
    return -1  # unknown name (an attribute imported from a module): no constraint


def _lab_rank(mod: str) -> int | None:
    parts = mod.split(".")
    if parts[0] != "lab":
        return None
    part = parts[1] if len(parts) > 1 else "__init__"
    for rank, names in enumerate(LAB_LAYERS):
        if part in names:
            return rank
    return -1


def test_every_lab_part_has_a_floor() -> None:
    known = {n for names in LAB_LAYERS for n in names}
    top = ROOT / "lab"
    parts = {p.stem for p in top.glob("*.py")}
    parts |= {p.name for p in top.iterdir() if (p / "__init__.py").is_file()}
    missing = sorted(parts - known)
    assert not missing, f"add {missing} to LAB_LAYERS"


def test_lab_imports_point_down() -> None:
    upward: list[str] = []
    for path in sorted((ROOT / "lab").rglob("*.py")):
        me = _module_name(path)
        mine = _lab_rank(me[: -len(".__init__")] if me.endswith(".__init__") else me)
        if me == "lab.__init__":
            mine = len(LAB_LAYERS) - 1
        for line, mod in _imports(path, me):
            theirs = _lab_rank(mod)
            if mine is not None and mine >= 0 and theirs is not None and theirs > mine:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    assert not upward, "imports that point up a floor of lab:\n" + "\n".join(upward)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (every import, function bodies too)."""
    graph: dict[str, set[str]] = {}
    for path in _modules():
        me = _module_name(path).removesuffix(".__init__")
        deps = set()
        for _line, mod in _imports(path, _module_name(path)):
            # the longest prefix of the import that is a module of the project
            parts = mod.split(".")
            while parts and not _is_module(".".join(parts)):
                parts.pop()
            if parts and parts[0] in PACKAGES:
                dep = ".".join(parts)
                if dep != me and not me.startswith(dep + "."):  # a package's own __init__
                    deps.add(dep)
        graph[me] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles() -> None:
    """No two modules of the project import each other, however indirectly (a circle hidden
    in a function body counts: it is where circles used to hide)."""
    circles = _cycles(_import_graph())
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_circle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_mrcnic_part_has_a_layer() -> None:
    known = {n for names in MRCNIC_LAYERS for n in names}
    top = ROOT / "mrcnic"
    parts = {p.stem for p in top.glob("*.py")}
    parts |= {p.name for p in top.iterdir() if (p / "__init__.py").is_file()}
    missing = sorted(parts - known)
    assert not missing, f"add {missing} to MRCNIC_LAYERS"


def test_imports_point_down() -> None:
    upward: list[str] = []
    for path in _modules():
        me = _module_name(path)
        my_pkg = _package_rank(me)
        my_layer = _mrcnic_rank(me if not me.endswith(".__init__") else me[: -len(".__init__")])
        if me == "mrcnic.__init__":
            my_layer = len(MRCNIC_LAYERS) - 1
        for line, mod in _imports(path, me):
            theirs = _package_rank(mod)
            where = f"{path.relative_to(ROOT)}:{line} imports {mod}"
            if theirs is not None and my_pkg is not None and theirs > my_pkg:
                upward.append(where)
                continue
            if my_layer is not None and my_layer >= 0 and mod.startswith("mrcnic"):
                their_layer = _mrcnic_rank(mod)
                if their_layer is not None and their_layer > my_layer:
                    upward.append(where)
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


@pytest.mark.parametrize("pkg", ["mrcnic", "mrcswitch", "lab"])
def test_subpackages_say_what_they_hold(pkg: str) -> None:
    for init in sorted((ROOT / pkg).rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init.relative_to(ROOT)} has no docstring"
        assert len(doc.strip().splitlines()[0]) <= 120, f"{init}: first line over 120 chars"


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    """The checker itself: an import hidden in a function body is found."""
    f = tmp_path / "probe.py"
    f.write_text("def f():\n    from lab.fabric import netns\n    from . import sibling\n")
    found = _imports(f, "mrcnic.wire.probe")
    assert (2, "lab.fabric.netns") in found
    assert (3, "mrcnic.wire") in found
    assert _package_rank("lab.fabric.netns") > _package_rank("mrcnic.wire")
