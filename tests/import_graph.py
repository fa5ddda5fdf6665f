#!/usr/bin/python3
"""The imports of a Python package go one way: import_graph.py PACKAGE_DIR checks, from the source alone (no
module is imported, so no dependency such as torch is needed), that

  - every import statement is at the top level of its module (in an if or try there too, never in a function
    or class body, where an import hides a circle instead of removing it), and
  - the imports among the package's modules (`from . import x`, `from .x import y`, `import pkg.x`; a name that
    is not a module of the package comes from its __init__) have no circle.

Prints the offending import or the circle and exits 1, else prints the modules in an order that imports
each before its importers and exits 0. tests/test_scripts_lib.sh runs it on scripts/torch_ref/.
"""
import ast
import os
import sys


def modules_of(pkg_dir):
    """{module name: parsed source} of the .py files of the package (__init__ included)."""
    mods = {}
    for name in sorted(os.listdir(pkg_dir)):
        if name.endswith(".py"):
            path = os.path.join(pkg_dir, name)
            with open(path) as f:
                mods[name[:-3]] = ast.parse(f.read(), path)
    return mods


def nested_imports(tree):
    """(line, statement) of every import inside a function or class body."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    found.append((inner.lineno, ast.unparse(inner)))
    return sorted(set(found))


def targets(tree, pkg, mods):
    """The package's modules a module imports."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:  # from . import a, b: modules of the package, or names of its __init__
                out |= {a.name if a.name in mods else "__init__" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == pkg:
            rest = node.module.split(".")[1:]
            out.add(rest[0] if rest else "__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == pkg:
                    out.add(parts[1] if len(parts) > 1 else "__init__")
    return {t for t in out if t in mods}


def main(argv):
    pkg_dir = argv[1].rstrip("/")
    pkg = os.path.basename(pkg_dir)
    mods = modules_of(pkg_dir)
    bad = 0
    for name, tree in mods.items():
        for line, stmt in nested_imports(tree):
            print(f"{pkg}/{name}.py:{line}: an import inside a function or class: {stmt}")
            bad += 1
    graph = {name: targets(tree, pkg, mods) - {name} for name, tree in mods.items()}
    order, state = [], {}

    def visit(name, path):
        if state.get(name) == "done":
            return None
        if state.get(name) == "open":
            return path[path.index(name):] + [name]
        state[name] = "open"
        for t in sorted(graph[name]):
            circle = visit(t, path + [name])
            if circle:
                return circle
        state[name] = "done"
        order.append(name)
        return None

    for name in sorted(mods):
        circle = visit(name, [])
        if circle:
            print(f"{pkg}: an import circle: {' -> '.join(circle)}")
            return 1
    if bad:
        return 1
    print(f"{pkg}: {len(mods)} modules, every import at the top, no circle; in import order: {', '.join(order)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
