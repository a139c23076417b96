#!/usr/bin/env bash
# hack/deps.sh: the module dependency graph of src/, for issue #26 (one-way
# imports). This is a report tool. The check that CI runs is
# tests/layering.rs: it fails on a new import cycle or a new wrong-way
# import, and prints the KNOWN lists to paste. This script reads the same
# graph the same way (the scanner is a port of the test's): every leaf of a
# `use` tree and every path that starts with `crate::`, `super::`, `self::`,
# a child module or a name a `use` bound to a module (paths in attributes
# too). Each one is resolved to the file that defines the item, following
# re-exports. A module's `pub use` of its own descendants is a facade, not
# an import. Comments and literals are skipped, and so is #[cfg(test)] code
# unless TEST=1.
#
# Usage:
#   hack/deps.sh [MODE] [DIR]
#     MODE  edges   every file -> file edge, with its items and lines (default)
#           top     the top-level module graph (children of lib.rs)
#           cycles  strongly connected components, and all 2- and 3-cycles,
#                   between top-level modules and between files; the edges
#                   that close a cycle are what tests/layering.rs lists in
#                   KNOWN_TOP_CYCLES and KNOWN_FILE_CYCLES
#           upward  file edges the target layering forbids (KNOWN_UPWARD)
#           extern  per file, paths into kube, k8s_openapi, tonic, hyper,
#                   rustls, prost, ... (product code)
#           tests   the podprobe:: imports of tests/ and bench/, per module
#           all     top + cycles + upward + extern + tests
#     DIR   the checkout or crate folder to read (DIR/src); default this
#           checkout. The two arguments may come in either order.
#   Environment:
#     REV=<commit>   read that commit (git archive into a temp dir) instead
#                    of the work tree, so that line numbers are stable
#     TEST=1         include #[cfg(test)] code in the graph
#     REEXPORTS=1    count facades (`pub use child::X` in a parent) as edges
#     LAYERS_FILE=f  the layer map to use; the default is the LAYERS string
#                    of DIR/tests/layering.rs, or of this checkout's if DIR
#                    has none. The format: "allow L A B ..." lines (L may
#                    use A, B, ... and itself) and "layer L P ..." lines
#                    (module prefixes P are in L; the longest prefix wins;
#                    `crate` is lib.rs's own items).
#
# Examples:
#   hack/deps.sh cycles
#   REV=fd210bd hack/deps.sh upward
#   TEST=1 hack/deps.sh edges | grep testing
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
MODE=edges
REPO="$here"
for arg in "$@"; do
  case "$arg" in
    edges | top | cycles | upward | extern | tests | all) MODE="$arg" ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) REPO="$arg" ;;
  esac
done
if [ ! -f "$REPO/src/lib.rs" ]; then
  echo "deps.sh: $REPO/src/lib.rs not found" >&2
  exit 2
fi
if [ -n "${REV:-}" ]; then
  tmp=$(mktemp -d /tmp/podprobe-deps.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  paths=()
  for p in src tests bench; do
    if git -C "$REPO" cat-file -e "$REV:$p" 2>/dev/null; then paths+=("$p"); fi
  done
  git -C "$REPO" archive "$REV" "${paths[@]}" | tar -x -C "$tmp"
  REPO="$tmp"
fi
export REPO MODE HERE="$here"
exec python3 - <<'PY'
import collections, os, re, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `hack/deps.sh all | head`

REPO = os.environ["REPO"]; MODE = os.environ["MODE"]
INCLUDE_TEST = os.environ.get("TEST") == "1"
INCLUDE_REEXPORTS = os.environ.get("REEXPORTS") == "1"
SRC = os.path.join(REPO, "src")

# ------------------------------------------------------------ layer map ---
def read_layers():
    lf = os.environ.get("LAYERS_FILE")
    if lf:
        return open(lf).read()
    for base in (REPO, os.environ["HERE"]):
        p = os.path.join(base, "tests", "layering.rs")
        if os.path.exists(p):
            m = re.search(r'const LAYERS: &str = "(.*?)";', open(p).read(), re.S)
            if m:
                return m.group(1)
    sys.exit("deps.sh: no layer map (tests/layering.rs's LAYERS, or LAYERS_FILE)")

LAYERS = {}; ALLOW = {}
for ln in read_layers().splitlines():
    parts = ln.split("#")[0].split()
    if not parts: continue
    if parts[0] == "allow":
        ALLOW[parts[1]] = set(parts[2:]) | {parts[1]}
    elif parts[0] == "layer":
        for prefix in parts[2:]:
            LAYERS[prefix] = parts[1]

def layer_of(mod):
    best, bl = None, -1
    for k, v in LAYERS.items():
        if (mod == k or mod.startswith(k + "::")) and len(k) > bl:
            best, bl = v, len(k)
    return best

# ---------------------------------------------------------------- lexer ---
def is_ident_char(c):
    return c == "_" or c.isalnum()

def is_ident(t):
    return bool(t) and (t[0] == "_" or t[0].isalpha())

def skip_quoted(c, i, line):
    """Index after the literal whose opening quote is at i; new line count."""
    q = c[i]; i += 1; n = len(c)
    while i < n and c[i] != q:
        if c[i] == "\\": i += 1
        if i < n and c[i] == "\n": line += 1
        i += 1
    return i + 1, line

def lex(c):
    """Tokens (text, line): no comments; each literal is one '""' token."""
    n = len(c); at = lambda i: c[i] if i < n else "\0"
    out = []; i = 0; line = 1
    while i < n:
        ch = c[i]; start_line = line
        if ch == "\n":
            line += 1; i += 1
        elif ch.isspace():
            i += 1
        elif ch == "/" and at(i + 1) == "/":
            while i < n and c[i] != "\n": i += 1
        elif ch == "/" and at(i + 1) == "*":
            depth = 0
            while i < n:
                if c[i] == "/" and at(i + 1) == "*": depth += 1; i += 2
                elif c[i] == "*" and at(i + 1) == "/":
                    depth -= 1; i += 2
                    if depth == 0: break
                else:
                    line += c[i] == "\n"; i += 1
        elif is_ident_char(ch):
            s = i
            while i < n and is_ident_char(c[i]): i += 1
            word = c[s:i]
            if word in ("r", "br", "cr") and at(i) in '"#':
                j = i
                while at(j) == "#": j += 1
                hashes = j - i
                if at(j) == '"':
                    j += 1
                    while j < n and not (c[j] == '"' and all(at(j + k) == "#" for k in range(1, hashes + 1))):
                        line += c[j] == "\n"; j += 1
                    i = j + 1 + hashes; out.append(('""', start_line)); continue
                if word == "r" and hashes == 1 and is_ident_char(at(j)):
                    s = j
                    while j < n and is_ident_char(c[j]): j += 1
                    out.append((c[s:j], line)); i = j; continue
                out.append((word, line))
            elif (word in ("b", "c") and at(i) == '"') or (word == "b" and at(i) == "'"):
                i, line = skip_quoted(c, i, line); out.append(('""', start_line))
            else:
                out.append((word, line))
        elif ch == '"':
            i, line = skip_quoted(c, i, line); out.append(('""', start_line))
        elif ch == "'" and (at(i + 1) == "\\" or (at(i + 1) != "\n" and at(i + 2) == "'")):
            i, line = skip_quoted(c, i, line); out.append(('""', start_line))
        elif ch == ":" and at(i + 1) == ":":
            out.append(("::", line)); i += 2
        else:
            out.append((ch, line)); i += 1
    return out

# -------------------------------------------------------------- scanner ---
def tx(t, i):
    return t[i][0] if 0 <= i < len(t) else ""

def matching(t, o):
    d = 0
    for i in range(o, len(t)):
        if t[i][0] in "([{": d += 1
        elif t[i][0] in ")]}":
            d -= 1
            if d == 0: return i
    return len(t)

def item_end(t, i):
    d = 0
    while i < len(t):
        s = t[i][0]
        if s in ("(", "[", "{"): d += 1
        elif s in (")", "]"): d = max(0, d - 1)
        elif s == "}":
            if d == 0: return i
            d -= 1
            if d == 0: return i + 1
        elif s == ";" and d == 0: return i + 1
        i += 1
    return i

def is_test_cfg(words):
    if words == ["cfg", "(", "test", ")"]: return True
    if words[:4] != ["cfg", "(", "all", "("]: return False
    d = 0
    for w in words[3:]:
        if w == "(": d += 1
        elif w == ")": d = max(0, d - 1)
        elif w == "test" and d == 1: return True
    return False

def path_at(t, i, alias):
    if not is_ident(tx(t, i)) or tx(t, i + 1) != "::": return None
    if tx(t, i - 1) == "::" or (tx(t, i - 1) == "in" and tx(t, i - 2) == "("): return None
    segs = [tx(t, i)]; j = i + 1
    while tx(t, j) == "::" and is_ident(tx(t, j + 1)):
        segs.append(tx(t, j + 1)); j += 2
    if alias and segs[0] == alias: segs[0] = "crate"
    return segs, j

def use_tree(t, pos, prefix, out):
    """Leaves (segs, bound name, glob, line) of the use tree at t[pos]; new pos."""
    segs = list(prefix)
    while pos < len(t):
        s, ln = t[pos]
        if s == "::": pos += 1
        elif s == "{":
            pos += 1
            while pos < len(t):
                if tx(t, pos) == "}": return pos + 1
                if tx(t, pos) == ",": pos += 1
                else: pos = use_tree(t, pos, segs, out)
            return pos
        elif s == "*":
            out.append((segs, None, True, ln)); return pos + 1
        elif is_ident(s):
            segs.append(s); pos += 1
            if tx(t, pos) == "::": continue
            if segs[-1] == "self": segs.pop()
            name = segs[-1] if segs else None
            if tx(t, pos) == "as":
                name = tx(t, pos + 1); name = None if name == "_" else name; pos += 2
            out.append((segs, name, False, ln)); return pos
        else:
            return pos + 1
    return pos

def is_public(t, i):
    p = tx(t, i - 1)
    if p == "pub": return True
    if p != ")": return False
    d = 0; j = i - 1
    while j >= 0:
        if t[j][0] == ")": d += 1
        elif t[j][0] == "(":
            d -= 1
            if d == 0: return tx(t, j - 1) == "pub"
        j -= 1
    return False

def scan(t, alias=None):
    """Records of one file: every record has "scope" (inline module path in
    the file) and "test" (under #[cfg(test)])."""
    res = {"test_only": False, "mods": [], "inline": [], "uses": [], "paths": [],
           "names": set()}  # (scope, name, test) of names used outside `use` items
    stack = []          # ("block", None) | ("mod", name), innermost last
    test_until = -1     # tokens before this index are a #[cfg(test)] item
    test_item = False
    attr_paths = []; attr_names = []
    def scope(): return tuple(n for k, n in stack if k == "mod")
    # a name in the code: not a method or field after `.`, nor a new `let`
    def is_name(i): return is_ident(tx(t, i)) and tx(t, i - 1) not in (".", "let")
    i = 0
    while i < len(t):
        s = t[i][0]; in_test = i < test_until
        inner = s == "#" and tx(t, i + 1) == "!" and tx(t, i + 2) == "["
        if (s == "#" and tx(t, i + 1) == "[") or inner:
            o = i + 2 if inner else i + 1; c = matching(t, o)
            if is_test_cfg([x[0] for x in t[o + 1:c]]):
                if inner and not stack: res["test_only"] = True
                elif not inner: test_item = True
            j = o + 1
            while j < c:
                if is_name(j): attr_names.append((scope(), tx(t, j)))
                p = path_at(t, j, alias)
                if p: attr_paths.append({"scope": scope(), "segs": p[0], "line": t[j][1]}); j = p[1]
                else: j += 1
            i = c + 1; continue
        if test_item:
            test_item = False
            if not in_test: test_until = item_end(t, i); in_test = True
        for a in attr_paths: a["test"] = in_test
        res["paths"] += attr_paths; attr_paths = []
        res["names"] |= {(sc_, n, in_test) for sc_, n in attr_names}; attr_names = []
        if s == "use" and tx(t, i + 1) != "<":
            end = i + 1; d = 0
            while end < len(t) and not (t[end][0] == ";" and d == 0):
                if t[end][0] == "{": d += 1
                elif t[end][0] == "}": d = max(0, d - 1)
                end += 1
            leaves = []; use_tree(t[:end], i + 1, [], leaves)
            module_level = all(k == "mod" for k, _ in stack)
            for segs, name, glob, ln in leaves:
                if alias and segs and segs[0] == alias: segs[0] = "crate"
                if segs:
                    res["uses"].append({"scope": scope(), "segs": segs, "name": name, "glob": glob,
                                        "pub": is_public(t, i), "module_level": module_level,
                                        "line": ln, "test": in_test})
            i = end + 1; continue
        if s == "mod" and is_ident(tx(t, i + 1)) and tx(t, i + 2) in (";", "{"):
            name = tx(t, i + 1)
            if tx(t, i + 2) == ";":
                res["mods"].append((scope(), name, in_test))
            else:
                stack.append(("mod", name)); res["inline"].append(scope())
            i += 3; continue
        if s == "{": stack.append(("block", None))
        elif s == "}":
            if stack: stack.pop()
        else:
            if is_name(i): res["names"].add((scope(), s, in_test))
            p = path_at(t, i, alias)
            if p:
                res["paths"].append({"scope": scope(), "segs": p[0], "line": t[i][1], "test": in_test})
                i = p[1]; continue
        i += 1
    return res

# ---------------------------------------------------------- module tree ---
files = {}      # module ("" = crate root) -> path
scans = {}      # module -> scan
file_test = {}  # module -> the whole file is test code
queue = [("", os.path.join(SRC, "lib.rs"), None, False)]
if os.path.exists(os.path.join(SRC, "main.rs")):
    queue.append(("main", os.path.join(SRC, "main.rs"), "podprobe", False))
while queue:
    mod, path, alias, test = queue.pop(0)
    sc = scan(lex(open(path).read()), alias)
    test = test or sc["test_only"]
    if test and not INCLUDE_TEST: continue
    d = os.path.dirname(path); stem = os.path.splitext(os.path.basename(path))[0]
    if not (mod == "" or alias or stem == "mod"): d = os.path.join(d, stem)
    for scope_, name, t in sc["mods"]:
        if t and not INCLUDE_TEST: continue
        folder = os.path.join(d, *scope_)
        cands = [os.path.join(folder, name + ".rs"), os.path.join(folder, name, "mod.rs")]
        f = next((x for x in cands if os.path.exists(x)), None)
        if f is None:
            print(f"deps.sh: {path}: no file for `mod {name};`", file=sys.stderr); continue
        queue.append(("::".join([x for x in [mod, *scope_, name] if x]), f, alias, test or t))
    files[mod] = path; scans[mod] = sc; file_test[mod] = test

def split(m): return m.split("::") if m else []
def join(s): return "::".join(s)
def disp(m): return m if m else "crate"
def top(m): return disp(m).split("::")[0]

known = set(files)
for m, sc in scans.items():
    for inl in sc["inline"]:
        known.add(join(split(m) + list(inl)))

def absolute(here, segs):
    if segs[0] == "crate": return segs[1:]
    if segs[0] == "self": return here + segs[1:]
    if segs[0] == "super":
        k = 0
        while k < len(segs) and segs[k] == "super": k += 1
        if k > len(here): return None
        return here[:len(here) - k] + segs[k:]
    if join(here + [segs[0]]) in known: return here + segs
    return None

def module_prefix(path):
    k = len(path)
    while k > 0 and join(path[:k]) not in known: k -= 1
    return k

def file_of(mod):
    s = split(mod)
    while s and join(s) not in files: s = s[:-1]
    return join(s)

def counts(rec): return INCLUDE_TEST or not rec["test"]

reexports = collections.defaultdict(dict)   # scope -> name -> path
bindings = collections.defaultdict(dict)    # scope -> name -> path or None
for m, sc in scans.items():
    for u in sc["uses"]:
        if not u["name"] or not counts(u): continue
        here = split(m) + list(u["scope"])
        a = absolute(here, u["segs"])
        if u["module_level"] and a is not None: reexports[join(here)][u["name"]] = a
        bindings[join(here)][u["name"]] = a

def resolve(path):
    """A path from the crate root -> (file module that defines it, item)."""
    for _ in range(8):
        k = module_prefix(path)
        tgt = reexports.get(join(path[:k]), {}).get(path[k]) if k < len(path) else None
        if tgt is None or tgt == path[:k + 1]: break
        path = tgt + path[k + 1:]
    k = module_prefix(path)
    return file_of(join(path[:k])), (path[k] if k < len(path) else "mod " + disp(join(path)))

# ---------------------------------------------------------------- edges ---
# src -> dst -> {(item, line, test, facade)}
edges = collections.defaultdict(lambda: collections.defaultdict(set))
for m, sc in scans.items():
    def add(path, rec, facade=False, glob=False):
        dst, item = resolve(path)
        if dst != m:
            edges[m][dst].add(("*" if glob else item, rec["line"], rec["test"] or file_test[m], facade))
    for u in sc["uses"]:
        here = split(m) + list(u["scope"])
        a = absolute(here, u["segs"])
        if a is None: continue
        tgt = a[:module_prefix(a)]
        # a facade, unless the module uses the name itself
        used = any((u["scope"], u["name"], t_) in sc["names"] for t_ in ((False, True) if INCLUDE_TEST else (False,)))
        facade = u["pub"] and not used and len(tgt) > len(here) and tgt[:len(here)] == here
        add(a, u, facade, u["glob"])
    for p in sc["paths"]:
        here = split(m) + list(p["scope"]); segs = p["segs"]
        if segs[0] in ("crate", "self", "super"):
            a = absolute(here, segs)
        elif segs[0] in bindings.get(join(here), {}):
            tgt = bindings[join(here)][segs[0]]
            a = tgt + segs[1:] if tgt is not None and join(tgt) in known else None
        else:
            a = absolute(here, segs)
        if a is not None: add(a, p)

def prod(e):
    return [x for x in e if (INCLUDE_TEST or not x[2]) and (INCLUDE_REEXPORTS or not x[3])]

def graph(level):
    g = collections.defaultdict(lambda: collections.defaultdict(set))
    for s, d in edges.items():
        for t, items in d.items():
            its = prod(items)
            if not its: continue
            a, b = (top(s), top(t)) if level == "top" else (disp(s), disp(t))
            if a == b: continue
            for it in its: g[a][b].add(it)
    return g

def fmt_items(its, limit=6):
    names = sorted({i[0] for i in its})
    lines = sorted({i[1] for i in its})
    s = ", ".join(names[:limit]) + (" …" if len(names) > limit else "")
    return f"{s}  (L{','.join(map(str, lines[:6]))}{'…' if len(lines) > 6 else ''})"

def rel(m):
    return os.path.relpath(files[m], REPO) if m in files else m

# --------------------------------------------------------------- cycles ---
def tarjan(g, nodes):
    idx = {}; low = {}; on = set(); st = []; out = []; c = [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in g.get(v, {}):
            if w not in idx: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(sorted(comp))
    for v in sorted(nodes):
        if v not in idx: sc(v)
    return [x for x in out if len(x) > 1]

def short_cycles(g):
    seen = set(); out = []
    for a in sorted(g):
        for b in sorted(g[a]):
            if a in g.get(b, {}) and (b, a) not in seen:
                seen.add((a, b)); out.append((a, b))
    tri = set()
    for a in sorted(g):
        for b in sorted(g[a]):
            for c2 in sorted(g.get(b, {})):
                if c2 not in (a, b) and a in g.get(c2, {}):
                    key = tuple(sorted((a, b, c2)))
                    if key not in tri:
                        tri.add(key); out.append((a, b, c2))
    return out

def show_cycles(g, label):
    nodes = set(g) | {d for s in g for d in g[s]}
    print(f"## {label}: strongly connected components (size > 1)")
    closing = 0
    for comp in tarjan(g, nodes):
        print(f"- SCC of {len(comp)}: " + ", ".join(comp))
        for s in comp:
            for d in sorted(g[s]):
                if d in comp:
                    closing += 1
                    print(f"    {s} -> {d}: {fmt_items(g[s][d])}")
    print(f"({closing} edges close a cycle)")
    print(f"## {label}: 2-cycles and 3-cycles")
    for cyc in short_cycles(g):
        path = list(cyc) + [cyc[0]]
        print("- " + " -> ".join(path) + "   [" + " | ".join(
            f"{path[k]}->{path[k+1]}: {fmt_items(g[path[k]][path[k+1]], 4)}" for k in range(len(cyc))) + "]")
    print()

# -------------------------------------------------------------- reports ---
if MODE == "edges":
    for s in sorted(edges, key=disp):
        for d in sorted(edges[s], key=disp):
            its = prod(edges[s][d])
            if its:
                tag = (" [test]" if all(x[2] for x in its) else "") + (" [re-export]" if all(x[3] for x in its) else "")
                print(f"{rel(s)} -> {disp(d)}{tag}: {fmt_items(its, 12)}")

if MODE in ("top", "all"):
    g = graph("top")
    print("## top-level module graph (product code" + (" + tests" if INCLUDE_TEST else "") + ")")
    for s in sorted(g):
        print(f"{s} -> " + ", ".join(sorted(g[s])))
    print()

if MODE in ("cycles", "all"):
    show_cycles(graph("top"), "top-level modules")
    show_cycles(graph("file"), "file modules")

if MODE in ("upward", "all"):
    print("## file-level edges the target layering does not allow (UP: the reverse is allowed; SIDE: neither)")
    g = graph("file")
    bad = 0
    for s_ in sorted(g):
        for d in sorted(g[s_]):
            ls, ld = layer_of(s_), layer_of(d)
            if ls is None or ld is None:
                print(f"  ? unlayered: {s_} -> {d}"); continue
            if ld in ALLOW.get(ls, {ls}):
                continue
            kind = "UP  " if ls in ALLOW.get(ld, set()) else "SIDE"
            bad += 1
            print(f"- {kind} {s_} [{ls}] -> {d} [{ld}]: {fmt_items(g[s_][d])}")
    print(f"({bad} edges)")
    print()

HEAVY = ["kube", "k8s_openapi", "tonic", "tonic_health", "tonic_prost", "hyper", "hyper_util", "rustls", "tokio_rustls", "prost"]
if MODE in ("extern", "all"):
    print("## paths into heavy external crates, per file (product code" + (" + tests" if INCLUDE_TEST else "") + ")")
    for m in sorted(files, key=disp):
        cnt = collections.Counter()
        sc = scans[m]
        for rec in sc["uses"] + sc["paths"]:
            if counts(rec) and rec["segs"][0] in HEAVY:
                cnt[rec["segs"][0]] += 1
        if cnt:
            print(f"{rel(m)}: " + ", ".join(f"{k}×{v}" for k, v in sorted(cnt.items())))
    print()

if MODE in ("tests", "all"):
    print("## podprobe:: paths used by tests/ and bench/ (per target module)")
    per_top = collections.Counter(); per_file = collections.Counter(); per_src = collections.defaultdict(set)
    for r in (os.path.join(REPO, "tests"), os.path.join(REPO, "bench")):
        for root, _, fs in os.walk(r):
            if "target" in root.split(os.sep): continue
            for f in fs:
                if not f.endswith(".rs"): continue
                p = os.path.join(root, f)
                sc = scan(lex(open(p).read()))
                for rec in sc["uses"] + sc["paths"]:
                    segs = rec["segs"]
                    if segs[0] != "podprobe" or len(segs) < 2: continue
                    dst, item = resolve(segs[1:])
                    dst = disp(dst)
                    key = (os.path.relpath(p, REPO), "::".join(segs[1:]))
                    if key in per_src[dst]: continue
                    per_src[dst].add(key)
                    per_top[top(dst)] += 1; per_file[dst] += 1
    for k, v in per_top.most_common():
        print(f"{k}: {v} distinct (file, path) imports")
    print()
    for k in sorted(per_file):
        fl = sorted({a for a, b in per_src[k]})
        print(f"  {k}: {per_file[k]} in {len(fl)} files: " + ", ".join(fl))
    print()
    print("## the same imports as spelled (module path written in the test), with the items")
    spelled = collections.defaultdict(lambda: collections.defaultdict(set))
    for k, pairs in per_src.items():
        for f, path in pairs:
            segs = path.split("::")
            modp = "::".join(segs[:-1]) or "(root)"
            spelled[modp][segs[-1]].add(f)
    for modp in sorted(spelled):
        n = sum(len(v) for v in spelled[modp].values())
        fl = sorted({f for v in spelled[modp].values() for f in v})
        print(f"podprobe::{modp}: {n} imports in {len(fl)} files")
        for item in sorted(spelled[modp]):
            print(f"    {item}: " + ", ".join(sorted(spelled[modp][item])))
PY
