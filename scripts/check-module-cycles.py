#!/usr/bin/env python3
"""No import cycles between the top-level modules of a crate.

For every crate under crates/ (and the root crate), each top-level module (src/NAME.rs or
src/NAME/, with its submodules) is a node; `crate::OTHER` in a module's code (not in its
comments) is an edge. A strongly connected component of more than one module is a cycle:
it is printed with the references that make it, and the script fails.

    python3 scripts/check-module-cycles.py [CRATE_DIR...]
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
REF = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")


def modules(src):
    """Top-level module name -> its files."""
    mods = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).parts
        if rel in (("lib.rs",), ("main.rs",)) or rel[0] == "bin":
            continue
        name = rel[0][:-3] if len(rel) == 1 else rel[0]
        mods.setdefault(name, []).append(f)
    return mods


def code_lines(path):
    for n, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("//"):
            continue
        yield n, line.split("//")[0] if "//" in line and '"' not in line else line


def edges(mods):
    out = {m: {} for m in mods}
    for m, files in mods.items():
        for f in files:
            for n, line in code_lines(f):
                for target in REF.findall(line):
                    if target != m and target in mods:
                        out[m].setdefault(target, f"{f.relative_to(ROOT)}:{n}")
    return out


def sccs(graph):
    index, low, stack, on, result, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            result.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [c for c in result if len(c) > 1]


def name(crate):
    return "floodgate (root)" if crate == ROOT else crate.name


def main(args):
    crates = [pathlib.Path(a) for a in args] or [ROOT] + sorted((ROOT / "crates").iterdir())
    failed = False
    for crate in crates:
        src = crate / "src"
        if not src.is_dir():
            continue
        graph = edges(modules(src))
        for comp in sccs(graph):
            failed = True
            print(f"{name(crate)}: import cycle between {', '.join(sorted(comp))}")
            for a in sorted(comp):
                for b, where in sorted(graph[a].items()):
                    if b in comp:
                        print(f"  {a} -> {b}  ({where})")
    if failed:
        sys.exit(1)
    print(f"check-module-cycles: {len(crates)} crates, no import cycles")


if __name__ == "__main__":
    main(sys.argv[1:])
