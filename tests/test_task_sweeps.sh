#!/usr/bin/env bash
# scripts/mqar_sweep.sh and scripts/state_tracking.sh end to end at SCALE=tiny (a few optimizer steps per
# run): the table shapes (rows = mixers, columns = widths / depths / test lengths), that every cell is an
# accuracy in [0, 1], the CSVs, that finished runs are reused, that an interrupted run is resumed, that a
# run directory with another configuration is left alone, and the usage errors.
#   BIN=bin bash tests/test_task_sweeps.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
for t in seqtrain seqeval; do
    [ -x "$BIN/$t" ] || { echo "test_task_sweeps.sh: $BIN/$t not found (run from the repo root after make tools, or set BIN)" >&2; exit 2; }
done
export BIN=$(cd "$BIN" && pwd)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export SCALE=tiny JOBS=2 THREADS=1
unset SEQ_OUT SETTING DIMS LRS TS L_MAX SEEDS A5_LEN A5_LENS TEST_LENS PARITY_SEEDS
# the first five rows and one of the linear family (every row would cost CI time without testing the scripts more)
export MIXERS="attn_rope attn_nope attn_alibi rfa kla gla"
source tests/lib.sh || exit 2
test_scratch task-sweeps
MQ="$ROOT/scripts/mqar_sweep.sh"; ST="$ROOT/scripts/state_tracking.sh"
O="$W/out"
# rows of FILE: labels as given, NCOL cells each from column FIRST on, all accuracies in [0, 1]
acc_rows() {  # acc_rows FILE FIRST NCOL LABEL...
    local f=$1 first=$2 ncol=$3; shift 3
    [ "$(md_rows "$f" | cut -d'|' -f1)" = "$(printf '%s\n' "$@")" ] || return 1
    md_rows "$f" | awk -F'|' -v a="$first" -v n="$ncol" '{ if (NF != a + n - 1) exit 1; for (i = a; i < a + n; i++) if ($i !~ /^[01]\.[0-9]+$/ || $i + 0 > 1) exit 1 }'
}
LABELS=("Attention (RoPE)" "Attention (no position)" "Attention (ALiBi)" "RFA" "KLA" "GLA")

# --- usage errors
check "mqar_sweep.sh --help exits 0 and lists the settings" eval '"$MQ" --help | grep -q "kla_long"'
check "state_tracking.sh --help exits 0 and lists the scales" eval '"$ST" --help | grep -q "SCALE=tiny"'
check "a bad SCALE exits 2" eval 'SCALE=huge SEQ_OUT=$O "$MQ" 2>/dev/null; [ $? = 2 ]'
check "a bad SETTING exits 2" eval 'SETTING=nope SEQ_OUT=$O "$MQ" 2>/dev/null; [ $? = 2 ]'
check "an unknown mixer exits 2" eval 'MIXERS=lstm SEQ_OUT=$O "$ST" 2>/dev/null; [ $? = 2 ]'
check "an unknown option exits 2" eval 'SEQ_OUT=$O "$ST" --frobnicate 2>/dev/null; [ $? = 2 ]'

# --- kla_long at paper scale follows the KLA paper (Tables 10, 12): d 64/128/256 with batch 64/32/16, lr 1e-3, 5 seeds
SETTING=kla_long SCALE=paper MIXERS=kla SEQ_OUT=$W/kl "$MQ" --dry-run > "$W/dry_kl" 2>/dev/null
check "kla_long paper --dry-run: 15 runs (3 widths x 5 seeds), batch by width, lr 1e-3, run.seed" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mqar/kla_long.json " "$W/dry_kl")" = 15 ] &&
          grep "run.name=kla_long_T2048_kla_d64_lr1e-3_s1 " "$W/dry_kl" | grep -q -- "--set train.batch_size=64 " &&
          grep "run.name=kla_long_T2048_kla_d128_lr1e-3_s3 " "$W/dry_kl" | grep -q -- "--set train.batch_size=32 " &&
          grep "run.name=kla_long_T2048_kla_d256_lr1e-3_s5 " "$W/dry_kl" | grep -- "--set train.batch_size=16 " | grep -q -- "--set run.seed=5 " &&
          [ ! -d "$W/kl/runs/kla_long_T2048_kla_d64_lr1e-3_s1" ]'
cmd=$(grep "run.name=kla_long_T2048_kla_d256_lr1e-3_s1 " "$W/dry_kl"); eval "$cmd --print-config" > "$W/cfg_kl" 2>/dev/null
check "kla_long paper: patience 70 epochs on the test loss, an evaluation every epoch (12,800 / 16 = 800 steps), no Zoology stop" \
    python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["train"]
assert (t["patience"], t["patience_metric"], t["eval_every"], t["stop_at_acc"], t["epochs"]) == (70, "loss", 800, 0, 750), t' "$W/cfg_kl"
# --- kla_long's default rows: Table 12's state-matched models, each (row, d)'s state per layer printed before
# the runs and equal to Table 12's State Size column (GDN the next-largest feasible)
SETTING=kla_long SCALE=paper MIXERS= SEQ_OUT=$W/kl12 "$MQ" --dry-run > "$W/dry_kl12" 2> "$W/dry_kl12.err"
check "kla_long paper --dry-run: 60 runs (kla, mamba_t12, gdn_t12, gla_t12 x 3 widths x 5 seeds)" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mqar/kla_long.json " "$W/dry_kl12")" = 60 ] &&
          for m in kla mamba_t12 gdn_t12 gla_t12; do [ "$(grep -c "_${m}_d" "$W/dry_kl12")" = 15 ] || exit 1; done'
check "kla_long: the state per layer of every (row, d) is Table 12's (2,048 / 4,096 / 8,192; GDN 2,304 / 4,608 / 9,216)" \
    python3 -c '
import re, sys
got = {(m, int(d)): int(n) for m, d, n in re.findall(r"state per layer, (\w+) at d (\d+): .* = (\d+)$", open(sys.argv[1]).read(), re.M)}
want = {}
for d, s, g in ((64, 2048, 2304), (128, 4096, 4608), (256, 8192, 9216)):
    want.update({("kla", d): s, ("mamba_t12", d): s, ("gla_t12", d): s, ("gdn_t12", d): g})
assert got == want, got' "$W/dry_kl12.err"
SETTING=kla_long MIXERS= DIMS=32 SEQ_OUT=$W/kl12t JOBS=2 "$MQ" > /dev/null 2>&1; rc=$?
check "kla_long SCALE=tiny: the table has the 4 rows and their state per layer (d 32)" \
    eval '[ "$rc" = 0 ] && grep -A 7 "^State per layer" "$W/kl12t/mqar_kla_long_T16.md" | grep -q "^| KLA | 1024 |\$" &&
          [ "$(grep -A 7 "^State per layer" "$W/kl12t/mqar_kla_long_T16.md" | grep -cE "^\| (KLA|Mamba|Gated|GLA)[^|]*\| [0-9]+ \|\$")" = 4 ]'
check "a5.json: G.5's d_model 1024 and up to 500 epochs with patience 50, evaluated once an epoch" \
    python3 -c 'import json, subprocess, sys
c = json.loads(subprocess.check_output([sys.argv[1] + "/seqtrain", "--config", "configs/tasks/state/a5.json", "--print-config"]))
t = c["train"]
assert c["model"]["d_model"] == 1024 and (t["epochs"], t["patience"], t["eval_every"]) == (500, 50, 1563), t
assert c["optim"]["lr"] == 3e-4 and c["schedule"]["kind"] == "constant"' "$BIN"
check "a bad SEEDS exits 2" eval 'SEEDS=0 SEQ_OUT=$O "$MQ" --dry-run 2>/dev/null; [ $? = 2 ]'

# --- SCALE=medium: the default rows, widths and lr grid, the budget of every run (resolved configs), nproc jobs
# of 1 thread; zoology only
# the resolved config (JSON) of run $2 of dry run $1
dry_cfg() { local c; c=$(grep "run.name=$2 " "$1") || return 1; eval "${c/ --set run.dir=/ --print-config --set run.dir=}" 2>/dev/null; }
(unset MIXERS JOBS THREADS; SCALE=medium SEQ_OUT=$W/mm "$MQ" --dry-run > "$W/dry_mm" 2> "$W/dry_mm.err")
jobs2=$(( $(nproc) / 2 )); [ "$jobs2" -ge 1 ] || jobs2=1
check "mqar SCALE=medium --dry-run: 20 runs (5 mixers x d 64, 128 x lr 3e-4, 1e-3) at T 64, 2 threads each, nproc / 2 at a time, d 128 first" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mqar/zoology.json " "$W/dry_mm")" = 20 ] && [ -z "$(ls -A "$W/mm/runs")" ] &&
          [ "$(grep -o "run.name=[^ ]*" "$W/dry_mm" | sed "s/_d[0-9]*_lr.*//" | sort -u | tr "\n" " ")" = "run.name=zoology_T64_attn_rope run.name=zoology_T64_gated_deltanet run.name=zoology_T64_gla run.name=zoology_T64_kla run.name=zoology_T64_mamba2 " ] &&
          [ "$(grep -c -E "_d(64|128)_lr(3e-4|1e-3) --set run.threads=2$" "$W/dry_mm")" = 20 ] && grep -q "20 runs.*$jobs2 at a time, 2 threads each" "$W/dry_mm.err" &&
          [ "$(grep -o "run.name=[^ ]*" "$W/dry_mm" | head -n 10 | grep -c _d128_)" = 10 ]'
check "mqar SCALE=medium run configs: T 64, 4 pairs, 20,000 / 1,000 examples, batch 64, 8 epochs, eval every 200, stop at 0.99" \
    python3 - <(dry_cfg "$W/dry_mm" zoology_T64_attn_rope_d128_lr3e-4) <(dry_cfg "$W/dry_mm" zoology_T64_kla_d64_lr1e-3) <<'PY'
import json, sys
cfgs = [json.load(open(p)) for p in sys.argv[1:]]
assert len(cfgs) == 2
for c, d, lr in zip(cfgs, (128, 64), (3e-4, 1e-3)):
    t, task = c["train"], c["data"]["task"]
    assert t["seq_len"] == 64 and t["batch_size"] == 64 and t["epochs"] == 8 and t["eval_every"] == 200, t
    assert abs(t["stop_at_acc"] - 0.99) < 1e-12 and abs(c["optim"]["lr"] - lr) < 1e-12 and c["model"]["d_model"] == d
    assert task["num_kv_pairs"] == 4 and task["train_examples"] == 20000 and task["test_examples"] == 1000, task
assert cfgs[1]["model"]["mixer"]["kind"] == "kla" and cfgs[1]["model"]["block"] == "fused"
PY
check "mqar SCALE=medium with SETTING=kla_long exits 2" eval 'SETTING=kla_long SCALE=medium SEQ_OUT=$O "$MQ" --dry-run 2>/dev/null; [ $? = 2 ]'
check "a bad SCALE names medium among the scales" eval 'SCALE=huge SEQ_OUT=$O "$MQ" 2>&1 >/dev/null | grep -q "SCALE must be tiny, small, medium or paper"'
(unset MIXERS JOBS THREADS; SCALE=medium SEQ_OUT=$W/sm "$ST" --dry-run > "$W/dry_sm" 2> "$W/dry_sm.err")
check "state SCALE=medium --dry-run: 30 runs (6 mixers x (A5 at 1-2 layers x 2 seeds + parity)), 1 thread each" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/state/a5.json " "$W/dry_sm")" = 24 ] &&
          [ "$(grep -c "^$BIN/seqtrain --config configs/tasks/state/parity.json " "$W/dry_sm")" = 6 ] &&
          grep -q "run.name=parity_gated_deltanet_neg " "$W/dry_sm" && grep -q "run.name=a5_kla_L2_s2 " "$W/dry_sm" &&
          ! grep -q "run.name=a5_[a-z0-9_]*_L3_" "$W/dry_sm" && [ "$(grep -c -- "--set run.threads=1$" "$W/dry_sm")" = 30 ] &&
          grep -q "A5 at length 16, layers 1-2, 2 seeds; parity train 64, test 64,128,256,512" "$W/dry_sm.err"'
check "state SCALE=medium run configs: A5 d 128, length 16, 20 epochs of 20,000, lr 1e-3; parity d 64, length 64, 2 epochs, lr 1e-3, wd 1e-6" \
    python3 - <(dry_cfg "$W/dry_sm" a5_attn_rope_L2_s1) <(dry_cfg "$W/dry_sm" parity_gated_deltanet_neg) <<'PY'
import json, sys
a5, par = [json.load(open(p)) for p in sys.argv[1:]]
t, task = a5["train"], a5["data"]["task"]
assert a5["model"]["d_model"] == 128 and a5["model"]["n_layers"] == 2 and t["seq_len"] == 16 and t["epochs"] == 20, (a5["model"], t)
assert task["train_len_max"] == 16 and task["train_examples"] == 20000 and abs(a5["optim"]["lr"] - 1e-3) < 1e-12, task
t, task = par["train"], par["data"]["task"]
assert par["model"]["d_model"] == 64 and t["seq_len"] == 64 and t["epochs"] == 2 and task["train_len_max"] == 64, (par["model"], t)
assert abs(par["optim"]["lr"] - 1e-3) < 1e-12 and abs(par["optim"]["weight_decay"] - 1e-6) < 1e-15, par["optim"]
assert par["model"]["mixer"]["kind"] == "gated_deltanet" and par["model"]["mixer"]["allow_neg_eigval"] is True
PY

# --- an interrupted run: the sweep's own command for one run, stopped after 2 of its 4 steps
SEQ_OUT=$O "$MQ" --dry-run > "$W/dry" 2>/dev/null
check "--dry-run lists 24 runs (6 mixers x 2 widths x 2 lrs) and trains nothing" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config " "$W/dry")" = 24 ] && [ ! -d "$O/runs/zoology_T16_attn_rope_d16_lr1e-3" ]'
cmd=$(grep "run.name=zoology_T16_attn_rope_d16_lr1e-3 " "$W/dry")
eval "$cmd --stop-after 2 --quiet" > /dev/null 2>&1; rc=$?
check "one run stopped after 2 steps with a checkpoint (exit 130)" test "$rc" = 130 -a -f "$O/runs/zoology_T16_attn_rope_d16_lr1e-3/latest"

# --- MQAR
SEQ_OUT=$O "$MQ" > "$W/m.md" 2> "$W/m.err"; rc=$?
check "mqar_sweep.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || tail -n 20 "$W/m.err" | sed 's/^/    /'
check "the interrupted run was resumed" grep -q "zoology_T16_attn_rope_d16_lr1e-3: resuming" "$W/m.err"
check "the Markdown on stdout is SEQ_OUT/mqar_zoology_T16.md" eval 'diff <(md_rows "$W/m.md") <(md_rows "$O/mqar_zoology_T16.md")'
check "MQAR columns: Mixer, d=16, d=32" grep -qx '| Mixer | d=16 | d=32 |' "$O/mqar_zoology_T16.md"
check "MQAR rows: the 6 mixers, 2 accuracies in [0,1] each" acc_rows "$O/mqar_zoology_T16.md" 2 2 "${LABELS[@]}"
check "MQAR CSV: header, 6 rows, best accuracy and its lr per width" python3 -c '
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
assert r[0] == ["mixer", "label", "acc_d16", "lr_d16", "acc_d32", "lr_d32"], r[0]
assert len(r) == 7 and all(len(x) == 6 for x in r)
for x in r[1:]:
    assert 0 <= float(x[2]) <= 1 and 0 <= float(x[4]) <= 1 and x[3] in ("1e-3", "3e-3") and x[5] in ("1e-3", "3e-3")
runs = list(csv.reader(open(sys.argv[2])))
assert len(runs) == 25, len(runs)
for x in r[1:]:
    for j, d in ((2, "16"), (4, "32")):
        assert float(x[j]) == max(float(y[5]) for y in runs[1:] if y[2] == x[0] and y[3] == d)' \
    "$O/mqar_zoology_T16.csv" "$O/mqar_zoology_runs.csv"
check "the rfa row trained the rfa mixer with the SDE optimizer group, d and lr from the grid" \
    eval 'grep -q "\"kind\":.\"rfa\"" "$O/runs/zoology_T16_rfa_d32_lr3e-3/config.json" && grep -q "mixer.sde_" "$O/runs/zoology_T16_rfa_d32_lr3e-3/config.json" && grep -q "\"d_model\":.32," "$O/runs/zoology_T16_rfa_d32_lr3e-3/config.json" && grep -q "\"lr\":.0.003" "$O/runs/zoology_T16_rfa_d32_lr3e-3/config.json"'
check "MQAR state table: every (mixer, d), state = KV cache 2 layers x 2 x d x T (RFA: complex, 4 x d) or KLA 2 x (2 x d x 16 + 3 x d) or GLA 2 x 4 heads x d/8 x d/4" python3 -c '
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
assert r[0] == ["mixer", "d_model", "state_floats", "accuracy"], r[0]
assert len(r) == 13, len(r)
for m, d, st, acc in r[1:]:
    d, st = int(d), int(st)
    want = {"kla": 2 * (2 * d * 16 + 3 * d), "rfa": 2 * 4 * d * 16, "gla": 2 * 4 * (d // 8) * (d // 4)}.get(m, 2 * 2 * d * 16)
    assert st == want, (m, d, st, want)
    assert 0 <= float(acc) <= 1
md = open(sys.argv[2]).read().split("Accuracy vs decoding state size")[1]
states = [int(l.split("|")[3]) for l in md.splitlines() if l.startswith("| ") and l.split("|")[3].strip().isdigit()]
assert len(states) == 12 and states == sorted(states), states' "$O/mqar_zoology_T16_state.csv" "$O/mqar_zoology_T16.md"
check "the kla row trained fused kla blocks" eval 'grep -q "\"kind\":.\"kla\"" "$O/runs/zoology_T16_kla_d16_lr1e-3/config.json" && grep -q "\"block\":.\"fused\"" "$O/runs/zoology_T16_kla_d16_lr1e-3/config.json"'
check "the alibi row has pos alibi" grep -q '"pos":.*"alibi"' "$O/runs/zoology_T16_attn_alibi_d16_lr1e-3/config.json"
SEQ_OUT=$O "$MQ" > "$W/m2.md" 2> "$W/m2.err"; rc=$?
check "a second mqar_sweep.sh reuses all 24 runs and prints the same table" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "finished earlier, reused" "$W/m2.err")" = 24 ] && ! grep -q ": training" "$W/m2.err" && diff <(md_rows "$W/m.md") <(md_rows "$W/m2.md")'
SEQ_OUT=$O "$MQ" --set train.steps=5 > /dev/null 2> "$W/m3.err"; rc=$?
check "another configuration over finished runs: exit 1, nothing trained" \
    eval '[ "$rc" = 1 ] && [ "$(grep -c "holds a run with another configuration" "$W/m3.err")" = 24 ] && ! grep -q ": training" "$W/m3.err" && grep -q "steps" "$W/m3.err"'
check "... and the runs keep their results" eval 'diff <(md_rows "$W/m.md") <(SEQ_OUT=$O "$MQ" 2>/dev/null | md_rows /dev/stdin)'

# --- state tracking
SEQ_OUT=$O "$ST" > "$W/s.md" 2> "$W/s.err"; rc=$?
check "state_tracking.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || tail -n 20 "$W/s.err" | sed 's/^/    /'
check "A5 columns: Mixer, fewest layers, L=1, L=2" grep -qx '| Mixer | fewest layers | L=1 | L=2 |' "$O/a5.md"
check "A5 rows: the 6 mixers, accuracies in [0,1] per depth" acc_rows "$O/a5.md" 3 2 "${LABELS[@]}"
check "A5 fewest layers: 1, 2 or >2, consistent with the 0.9 threshold" python3 -c '
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
assert r[0] == ["mixer", "label", "length", "fewest_layers", "best_acc_L1", "best_acc_L2"], r[0]
assert len(r) == 7
for x in r[1:]:
    acc = [float(v) for v in x[4:]]
    want = next((str(i + 1) for i, a in enumerate(acc) if a >= 0.9), ">2")
    assert x[2] == "8" and x[3] == want, x' "$O/a5.csv"
check "A5 trained 6 mixers x 2 depths x 2 seeds" eval '[ "$(ls -d "$O"/runs/a5_*/eval | wc -l)" = 24 ] && grep -q "\"n_layers\":.2," "$O/runs/a5_rfa_L2_s2/config.json"'
# Fig. 1a: A5 over several sequence lengths, each its own runs (named by length) and table, and the summary
SEQ_OUT=$W/fig1a A5_LENS="4 8" PARTS=a5 MIXERS="kla gla" L_MAX=1 SEEDS=1 "$ST" > "$W/f1.md" 2> "$W/f1.err"; rc=$?
check "A5_LENS=\"4 8\": 2 lengths x 2 mixers, runs at their length, Fig. 1a's table of the fewest layers" python3 -c '
import csv, json, sys
d = sys.argv[1]
for m in ("kla", "gla"):
    for L in (1,):
        for T in (4, 8):
            c = json.load(open("%s/runs/a5_%s_L%d_s1_T%d/config.json" % (d, m, L, T)))
            assert c["train"]["seq_len"] == T and c["data"]["task"]["test_len_max"] == T and c["model"]["n_layers"] == L, (m, L, T)
r = list(csv.reader(open(d + "/a5.csv")))
assert [(x[0], x[2]) for x in r[1:]] == [("kla", "4"), ("gla", "4"), ("kla", "8"), ("gla", "8")], r
md = open(d + "/a5.md").read().split("**Fig. 1a")[1]
rows = [l.split("|")[1:-1] for l in md.splitlines() if l.startswith("| ") and "Mixer" not in l]
fewest = {(x[0], x[2]): x[3] for x in r[1:]}
assert [[c.strip() for c in x] for x in rows] == [["KLA", fewest["kla", "4"], fewest["kla", "8"]], ["GLA", fewest["gla", "4"], fewest["gla", "8"]]], rows' "$W/fig1a"
check "A5_LEN (the single-length name) is refused, naming A5_LENS" \
    eval 'A5_LEN=16 SEQ_OUT=$W/x "$ST" --dry-run 2> "$W/a5len.err"; [ $? = 2 ] && grep -q A5_LENS "$W/a5len.err"'
check "parity columns: Mixer, L=8, L=16, L=32" grep -qx '| Mixer | L=8 | L=16 | L=32 |' "$O/parity.md"
check "parity rows: the 6 mixers, 3 accuracies in [0,1]" acc_rows "$O/parity.md" 2 3 "${LABELS[@]}"
check "parity at the training length equals the trainer's own test accuracy" python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["accuracy"]; b = json.load(open(sys.argv[2]))["accuracy"]
assert abs(a - b) < 1e-6, (a, b)' "$O/runs/parity_attn_rope/eval/acc.json" "$O/runs/parity_attn_rope/eval/len_8.json"
check "parity at length 32 scored 32 positions per example" eval 'grep -q "\"positions\": 512," "$O/runs/parity_rfa/eval/len_32.json"'
SEQ_OUT=$O "$ST" > "$W/s2.md" 2> "$W/s2.err"; rc=$?
check "a second state_tracking.sh reuses all 30 runs and the evaluations, same tables" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "finished earlier, reused" "$W/s2.err")" = 30 ] && ! grep -q ": training" "$W/s2.err" && { [ ! -d "$O/evalcopy" ] || [ -z "$(ls -A "$O/evalcopy")" ]; } && diff <(md_rows "$W/s.md") <(md_rows "$W/s2.md")'

test_done
