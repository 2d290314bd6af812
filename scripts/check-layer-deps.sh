#!/usr/bin/env bash
# The tower layer stays lean: floodgate-http's normal dependency tree (default features)
# lists at most 50 distinct packages (a package cargo tree repeats with (*) counts once) and none of a Redis client, TLS (rustls, ring), hyper's
# client (hyper-util's client-legacy) or a TOML parser. Those belong to floodgate-proxy
# and to floodgate-engine's `redis` feature. .ci/run calls this before the tests.
#
# The crate boundaries stay visible: neither floodgate-http nor floodgate-proxy re-exports
# or aliases a floodgate-engine module (`pub use floodgate_engine::store;` in any of their
# files, or any `use` at the top of their lib.rs bringing an engine module, or a glob of
# the engine or the layer, into the crate root), so every crate names the engine's modules
# `floodgate_engine::...`. Re-exporting the engine's types is allowed.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
python3 - <<'EOF' || status=1
import pathlib, re, sys

def modules(crate, name):
    """The module paths of a crate, from its files: `floodgate_engine::admin::text`."""
    src = pathlib.Path(f"crates/{crate}/src")
    found = set()
    for f in src.rglob("*.rs"):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("lib", "mod", "main"):
            parts.pop()
        if parts:
            found.add("::".join([name] + parts))
    if not found:
        sys.exit(f"error: no modules found under {src}")
    return found


engine = modules("floodgate-engine", "floodgate_engine")
layer = modules("floodgate-http", "floodgate_http")


def leaves(tree, prefix):
    """(path, bound name) of each item a use tree imports; `*` for a glob."""
    tree = tree.strip()
    m = re.match(r"^(.*?)\{(.*)\}$", tree, re.S)
    if m:
        base = [p for p in m.group(1).split("::") if p.strip()]
        depth, part, parts = 0, "", []
        for c in m.group(2):
            depth += c == "{"
            depth -= c == "}"
            if c == "," and depth == 0:
                parts.append(part)
                part = ""
            else:
                part += c
        parts.append(part)
        for p in parts:
            if p.strip():
                yield from leaves(p, prefix + [b.strip() for b in base])
        return
    name = tree
    m = re.match(r"^(.*?)\s+as\s+(\w+)$", tree, re.S)
    if m:
        tree, name = m.group(1), m.group(2)
    path = prefix + [p.strip() for p in tree.split("::") if p.strip()]
    if path[-1] == "self":
        path = path[:-1]
    if name == tree:
        name = path[-1]
    yield path, name


bad = []
for crate in ("floodgate-http", "floodgate-proxy"):
    for f in sorted(pathlib.Path(f"crates/{crate}/src").rglob("*.rs")):
        text = re.sub(r"//[^\n]*", "", f.read_text())
        for m in re.finditer(r"^([ \t]*)(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text, re.M):
            indent, public, tree = m.groups()
            root = f.name == "lib.rs" and f.parent.name == "src" and indent == ""
            if not (public or root):
                continue
            for path, name in leaves(tree, []):
                if path[0] not in ("floodgate_engine", "floodgate_http", "::floodgate_engine"):
                    continue
                full = "::".join(path).lstrip(":")
                glob = path[-1] == "*"
                # an engine module, or (into the crate root) any module of the engine or
                # the layer, whatever the path it is reached by
                module = full in engine or (root and (full in layer or path[-1] in
                                                      {m.split("::")[-1] for m in engine}))
                if glob or module:
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{f}:{line}: `{'::'.join(path)}` (as `{name}`)")
if bad:
    print("error: floodgate-http and floodgate-proxy must not re-export or alias the engine's "
          "modules (name them `floodgate_engine::...` where they are used):", file=sys.stderr)
    for b in bad:
        print("  " + b, file=sys.stderr)
    sys.exit(1)
print(f"floodgate-http, floodgate-proxy: no re-export or alias of floodgate-engine's {len(engine)} modules")
EOF
max=${LAYER_DEPS_MAX:-50}
tree=$(cargo tree -p floodgate-http -e normal --prefix none | sort -u)
lines=$(wc -l <<<"$tree")
packages=$(sed 's/ (\*)$//' <<<"$tree" | sort -u | wc -l)
echo "floodgate-http: $lines lines of 'cargo tree -p floodgate-http -e normal --prefix none | sort -u', $packages distinct packages (at most $max)"
if [ "$packages" -gt "$max" ]; then
    echo "error: the layer's tree lists $packages distinct packages, more than $max:" >&2
    echo "$tree" >&2
    status=1
fi
forbidden=$(grep -E '^(redis|rustls|ring|toml|tokio-rustls) ' <<<"$tree" || true)
if [ -n "$forbidden" ]; then
    echo "error: the layer depends on packages it must not (they belong to the proxy or the engine's redis feature):" >&2
    echo "$forbidden" >&2
    status=1
fi
# hyper-util is allowed only without its HTTP client (client-legacy)
if grep -q '^hyper-util ' <<<"$tree"; then
    features=$(cargo tree -p floodgate-http -e normal,features -i hyper-util --prefix none 2>/dev/null || true)
    if grep -q 'client-legacy' <<<"$features"; then
        echo "error: the layer pulls hyper-util's client (client-legacy)" >&2
        status=1
    fi
fi
exit $status
