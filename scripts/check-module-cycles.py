#!/usr/bin/env python3
"""No import cycles between the modules of a crate, at any depth.

For every crate under crates/ (and the root crate), each module (src/a.rs or src/a/mod.rs
is `a`, src/a/b.rs is `a::b`) is a node. A path in a module's code (not in its comments
or in its `#[cfg(test)]` module) that names another module is a reference: `crate::a::b`,
`super::b`, `super::super::a::b`, `self::b`, and the members of a group such as
`super::{a::X, b}`. A reference is resolved to the deepest module its path names.

Modules are compared as siblings: a reference from anywhere in sibling X's subtree to
anywhere in sibling Y's subtree is an edge X -> Y among the children of their nearest
common parent (at the top, the crate's top-level modules). A module naming its own
ancestors (a child using its parent's items) or its own descendants (a parent using its
children) is no edge. A strongly connected component of more than one sibling is a
cycle: it is printed with the references that make it, and the script fails.

    python3 scripts/check-module-cycles.py [CRATE_DIR...]
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# a path from crate/super/self, with an optional group at its end
REF = re.compile(
    r"\b((?:crate|self|super)(?:::(?:super|" + IDENT + r"))*)(?:::\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\})?"
)


def module_path(src, f):
    rel = list(f.relative_to(src).parts)
    if rel in (["lib.rs"], ["main.rs"]):
        return ()
    if rel[-1] == "mod.rs":
        return tuple(rel[:-1])
    return tuple(rel[:-1] + [rel[-1][:-3]])


def modules(src):
    """Module path -> its file (binaries under src/bin are crates of their own)."""
    mods = {}
    for f in sorted(src.rglob("*.rs")):
        if f.relative_to(src).parts[0] == "bin":
            continue
        mods[module_path(src, f)] = f
    return mods


def code_lines(path):
    for n, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#[cfg(test)]"):
            return
        if stripped.startswith("//"):
            continue
        yield n, line.split("//")[0] if "//" in line and '"' not in line else line


def resolve(base, segments, mods):
    """The deepest module named by `segments` (crate/super/self first) from `base`."""
    path = list(base)
    rest = list(segments)
    if rest and rest[0] == "crate":
        path, rest = [], rest[1:]
    elif rest and rest[0] == "self":
        rest = rest[1:]
    while rest and rest[0] == "super":
        if not path:
            return None
        path, rest = path[:-1], rest[1:]
    target = tuple(path)
    for seg in rest:
        if tuple(path + [seg]) in mods:
            path.append(seg)
            target = tuple(path)
        else:
            break
    return target


def group_members(group):
    """The first-level members of a `{...}` group, as segment lists."""
    members, depth, cur = [], 0, ""
    for ch in group:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            members.append(cur)
            cur = ""
        else:
            cur += ch
    members.append(cur)
    out = []
    for m in members:
        m = m.strip().split(" as ")[0].strip()
        if not m or m == "*":
            continue
        head = re.match(r"(" + IDENT + r"(?:::" + IDENT + r")*)", m)
        if head:
            out.append(head.group(1).split("::"))
    return out


def references(mods):
    """(from module, to module, where) for every reference to another module."""
    for m, f in mods.items():
        for n, line in code_lines(f):
            for base, group in REF.findall(line):
                segs = base.split("::")
                paths = [segs + g for g in group_members(group)] if group else [segs]
                for p in paths:
                    t = resolve(m, p, mods)
                    if t is not None and t != m:
                        yield m, t, f"{f.relative_to(ROOT)}:{n}"


def sibling_graphs(mods):
    """Parent module -> {child: {child it refers to: where}}."""
    graphs = {}
    for a, b, where in references(mods):
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        if k == len(a) or k == len(b):
            continue  # an ancestor or a descendant
        parent, x, y = a[:k], a[: k + 1], b[: k + 1]
        g = graphs.setdefault(parent, {})
        g.setdefault(x, {}).setdefault(y, where)
        g.setdefault(y, {})
    return graphs


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


def show(path):
    return "::".join(path) or "crate"


def main(args):
    crates = [pathlib.Path(a) for a in args] or [ROOT] + sorted((ROOT / "crates").iterdir())
    failed = False
    checked = 0
    for crate in crates:
        src = crate / "src"
        if not src.is_dir():
            continue
        mods = modules(src)
        checked += len(mods)
        for parent, graph in sorted(sibling_graphs(mods).items()):
            for comp in sccs(graph):
                failed = True
                names = ", ".join(sorted(show(c) for c in comp))
                print(f"{name(crate)}: import cycle in {show(parent)} between {names}")
                for a in sorted(comp):
                    for b, where in sorted(graph[a].items()):
                        if b in comp:
                            print(f"  {show(a)} -> {show(b)}  ({where})")
    if failed:
        sys.exit(1)
    print(f"check-module-cycles: {len(crates)} crates, {checked} modules, no import cycles")


if __name__ == "__main__":
    main(sys.argv[1:])
