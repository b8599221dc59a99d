#!/bin/sh
# check_cycles.sh - no file of src/ (outside src/mpi) calls into a file that
# calls back into it, directly or through others.  The call graph between
# files is read from the symbols of libpinshm-core's objects (nm: what each
# defines, what each calls); a strongly connected group of more than one
# file is a cycle, and any call between two files of a cycle fails.
#
#     check_cycles.sh [--print]     (--print: every call between files)
#
# Skipped (77) without nm or python3, or before the objects are built.
set -eu

python=${PYTHON:-python3}
if ! command -v nm >/dev/null 2>&1 || ! command -v "$python" >/dev/null 2>&1; then
    echo "check_cycles: nm or $python is missing: skipped"
    exit 77
fi
if [ ! -f src/.libs/libpinshm-core.a ]; then
    echo "check_cycles: libpinshm-core's objects are not built: skipped"
    exit 77
fi
# The library's own members only: a build folder may keep objects of files
# that no longer exist.
set -- "${1:-}"
for o in $(ar t src/.libs/libpinshm-core.a); do
    for d in src/.libs src/device/.libs; do
        if [ -f "$d/$o" ]; then
            set -- "$@" "$d/$o"
        fi
    done
done

"$python" - "$@" <<'PY'
import os, re, subprocess, sys

mode, objs = sys.argv[1], sys.argv[2:]
defs, calls = {}, {}
for o in objs:
    name = re.sub(r'^libpinshm_core_la-|\.o$', '', os.path.basename(o))
    if '/device/' in o:
        name = 'device/' + name
    calls[name] = set()
    for line in subprocess.run(['nm', o], capture_output=True, text=True, check=True).stdout.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in 'TW':
            defs[f[2]] = name
        elif len(f) == 2 and f[0] == 'U':
            calls[name].add(f[1])
edges = {}
for a, syms in calls.items():
    for s in syms:
        b = defs.get(s)
        if b and b != a:
            edges.setdefault((a, b), set()).add(s)
if mode == '--print':
    for (a, b), syms in sorted(edges.items()):
        print('%s -> %s: %s' % (a, b, ' '.join(sorted(syms))))
    sys.exit(0)

# Tarjan's strongly connected components.
succ = {}
for a, b in edges:
    succ.setdefault(a, []).append(b)
index, low, stack, on, comp, n = {}, {}, [], set(), {}, [0]
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1
    stack.append(v); on.add(v)
    for w in succ.get(v, []):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        while True:
            w = stack.pop(); on.discard(w); comp[w] = v
            if w == v:
                break
for v in sorted(calls):
    if v not in index:
        visit(v)

cyclic = sorted((a, b) for (a, b) in edges if comp[a] == comp[b])
for a, b in cyclic:
    print('check_cycles: call in a cycle: %s -> %s (%s)' % (a, b, ' '.join(sorted(edges[(a, b)]))))
print('check_cycles: %d calls between files, %d in cycles' % (len(edges), len(cyclic)))
sys.exit(1 if cyclic else 0)
PY
