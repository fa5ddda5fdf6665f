#!/usr/bin/env bash
# Environment collisions: the scripts read only SEQ_-prefixed variables for where they write, so a shell that
# exports a generic OUT (CI systems, job schedulers) changes nothing. Each script runs with OUT pointing at a
# decoy folder: the WikiText-2 shards stay in build/data/wikitext2 (SEQ_DATA_DIR moves them), and the table
# and sweep scripts plan their runs under SEQ_OUT (their --dry-run output names it), never under OUT.
#
#   BIN=bin bash tests/test_env_names.sh
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-bin}
source tests/lib.sh || exit 2
test_scratch env
decoy="$W/decoy"

# prepare_wikitext2.sh: OUT is not its output folder, SEQ_DATA_DIR is
if OUT="$decoy" SEQTOK="$BIN/seqtok" bash scripts/prepare_wikitext2.sh > "$W/p.out" 2>&1 && [ ! -e "$decoy" ] \
   && [ -f build/data/wikitext2/train.shard ]; then
    ok "prepare_wikitext2.sh with OUT set writes build/data/wikitext2, not OUT"
else
    not_ok "prepare_wikitext2.sh ignores OUT" "$(tail -n 3 "$W/p.out"; ls "$decoy" 2>&1 | head -n 3)"
fi
if SEQ_DATA_DIR="$W/data" SEQTOK="$BIN/seqtok" bash scripts/prepare_wikitext2.sh > "$W/p2.out" 2>&1 \
   && [ -f "$W/data/train.shard" ] && [ -f "$W/data/valid.shard" ] && [ -f "$W/data/test.shard" ]; then
    ok "prepare_wikitext2.sh writes to SEQ_DATA_DIR"
else
    not_ok "prepare_wikitext2.sh SEQ_DATA_DIR" "$(tail -n 3 "$W/p2.out")"
fi

# the table and sweep scripts: --dry-run with OUT set and SEQ_OUT set plans under SEQ_OUT only
for s in scripts/rfa_table1.sh scripts/mad_table.sh scripts/mqar_sweep.sh scripts/state_tracking.sh scripts/selrope_tables.sh \
         scripts/selrope_lm.sh scripts/kla_lm.sh scripts/kla_figures.sh; do
    OUT="$decoy" SEQ_OUT="$W/out" SCALE=tiny BIN=$BIN bash "$s" --dry-run > "$W/d.out" 2>&1; rc=$?
    if [ "$rc" = 0 ] && grep -q "$W/out" "$W/d.out" && ! grep -q "$decoy" "$W/d.out" && [ ! -e "$decoy" ]; then
        ok "$s --dry-run plans under SEQ_OUT with OUT set"
    else
        not_ok "$s ignores OUT" "rc $rc: $(grep -m 2 "$decoy" "$W/d.out"; tail -n 2 "$W/d.out")"
    fi
done
test_done
