#!/usr/bin/env bash
# The shape of scripts/ and the shell tests, which nothing else checks: every sweep script runs its queue
# through scripts/lib/ (one run queue, not one per script), Python programs live in .py files (no here-document
# over 50 lines in a shell script), scripts/torch_ref/ imports one way with every import at the top of its
# module (tests/import_graph.py), and the shell tests take their shared helpers from tests/lib.sh. The two
# checkers are first shown to fail on a bad input. Needs nothing built.
#   bash tests/test_scripts_lib.sh     (run from the repository root)
set -u
cd "$(dirname "$0")/.." || exit 2
source tests/lib.sh || exit 2
test_scratch scripts-lib

# long_heredocs FILE...: "FILE:LINE: N lines" for each here-document of more than 50 lines
long_heredocs() {
    awk '
        FNR == 1 { tag = "" }
        tag == "" {
            s = $0; gsub(/<<</, "", s)
            if (match(s, /<<-?[ \t]*["\047]?[A-Za-z_][A-Za-z0-9_]*/)) {
                tag = substr(s, RSTART, RLENGTH); sub(/^<<-?[ \t]*["\047]?/, "", tag); start = FNR
            }
            next
        }
        { line = $0; sub(/^\t+/, "", line)
          if (line == tag) { if (FNR - start - 1 > 50) printf "%s:%d: %d lines\n", FILENAME, start, FNR - start - 1; tag = "" } }
    ' "$@"
}

# --- the checkers fail where they should
h='<<'  # (spelled so, lest this file's own scan take the fixture for a here-document)
{ echo "python3 - ${h}'PY'"; for i in $(seq 51); do echo "x = $i"; done; echo PY; echo "cat ${h}EOF"; echo short; echo EOF; } > "$W/long.sh"
check "long_heredocs reports a here-document of 51 lines, not one of 1" \
    eval '[ "$(long_heredocs "$W/long.sh")" = "$W/long.sh:1: 51 lines" ]'
mkdir -p "$W/circle" "$W/nested"
printf 'from . import b\n' > "$W/circle/a.py"; printf 'from .a import x\n' > "$W/circle/b.py"; : > "$W/circle/__init__.py"
printf 'def f():\n    from . import b\n' > "$W/nested/a.py"; : > "$W/nested/b.py"; : > "$W/nested/__init__.py"
python3 tests/import_graph.py "$W/circle" > "$W/circle.out" 2>&1; rc=$?
check "import_graph.py fails on a circle and names it" eval '[ "$rc" = 1 ] && grep -q "circle: a -> b -> a" "$W/circle.out"'
python3 tests/import_graph.py "$W/nested" > "$W/nested.out" 2>&1; rc=$?
check "import_graph.py fails on an import inside a function" eval '[ "$rc" = 1 ] && grep -q "a.py:2: an import inside a function" "$W/nested.out"'

# --- scripts/
python3 tests/import_graph.py scripts/torch_ref > "$W/torch_ref.out" 2>&1; rc=$?
DETAIL="$(cat "$W/torch_ref.out")" check "scripts/torch_ref/: every import at the top of its module, no import circle" test "$rc" = 0
long=$(long_heredocs scripts/*.sh scripts/lib/*.sh bench/*.sh tests/*.sh tests/*/*.sh)
DETAIL="$long" check "no here-document over 50 lines in scripts/, bench/ or tests/ (Python lives in .py files)" test -z "$long"
# the sweep scripts: every script with an output folder SEQ_OUT sources scripts/lib/ and keeps its names
lib_funcs=$(sed -n 's/^\([a-z_][a-z0-9_]*\)() *{.*/\1/p' scripts/lib/*.sh | sort -u)
nolib=""; redef=""
for f in $(grep -l 'SEQ_OUT' scripts/*.sh); do
    grep -q '^source "$(dirname "${BASH_SOURCE\[0\]}")/lib/' "$f" || nolib+=" $f"
    for fn in $(sed -n 's/^\([a-z_][a-z0-9_]*\)() *{.*/\1/p' "$f"); do
        case "$fn" in ppl_config_path|ppl_scale_sets|ppl_scale_note) continue ;; esac  # ppl_table.sh's hooks
        grep -qx "$fn" <<< "$lib_funcs" && redef+=" $f:$fn"
    done
done
DETAIL="not sourcing it:$nolib" check "every sweep script (SEQ_OUT) sources scripts/lib/" test -z "$nolib"
DETAIL="$redef" check "... and defines none of its functions but ppl_table.sh's hooks" test -z "$redef"
queues=$(grep -l 'wait -n' scripts/*.sh scripts/lib/*.sh)
DETAIL="$queues" check "one run queue: only scripts/lib/runq.sh waits for runs (wait -n)" test "$queues" = scripts/lib/runq.sh
# (tests/gpu/run.sh keeps its own check, which adds a comparison's first line to its ok line)
shared=$(grep -nE '^(check|check_status|run|show|md_rows)\(\)' tests/*.sh tests/mpi/*.sh | grep -v '^tests/lib.sh:')
DETAIL="$shared" check "the shell tests take check, check_status, run, show and md_rows from tests/lib.sh" test -z "$shared"

test_done
