#!/usr/bin/env bash
# scripts/mad_table.sh end to end at SCALE=tiny (2 steps of a d32 model per run, 16 mixers x 6 MAD tasks x 1
# grid point): the rows and columns, every cell an accuracy in [0, 1], the average, the CSV, that an
# interrupted run is resumed, that a second call reuses every finished run, and the usage errors.
#   BIN=bin bash tests/test_mad_table.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
[ -x "$BIN/seqtrain" ] || { echo "test_mad_table.sh: $BIN/seqtrain not found (run from the repo root after make tools, or set BIN)" >&2; exit 2; }
export BIN=$(cd "$BIN" && pwd)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export SCALE=tiny JOBS=2 THREADS=1 PROGRESS_EVERY=0
unset SEQ_OUT ROWS TASKS LRS WDS SEEDS PROTOCOL
source tests/lib.sh || exit 2
test_scratch mad-table
S="$ROOT/scripts/mad_table.sh"
O="$W/out"

# --- usage
check "--help exits 0 and describes the scales" eval '"$S" --help | grep -q "SCALE=tiny|small|medium|paper"'
check "a bad SCALE exits 2" eval 'SCALE=huge SEQ_OUT=$O "$S" 2>/dev/null; [ $? = 2 ]'
check "an unknown option exits 2" eval 'SEQ_OUT=$O "$S" --frobnicate 2>/dev/null; [ $? = 2 ]'
check "ROWS that select nothing exit 2" eval 'ROWS=nope SEQ_OUT=$O "$S" 2>/dev/null; [ $? = 2 ]'

# --- an interrupted run, made from the script's own command with --stop-after 1
SEQ_OUT=$O "$S" --dry-run > "$W/dry" 2>/dev/null
check "--dry-run lists 96 fresh runs (16 rows x 6 tasks) and trains nothing" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config " "$W/dry")" = 96 ] && [ ! -d "$O/runs" ]'
# the KLA paper's protocol: 16 rows x 6 tasks x 2 seeds at tiny, from configs/tasks/mad/kla_protocol/
PROTOCOL=kla SEQ_OUT=$W/kla "$S" --dry-run > "$W/dry_kla" 2>/dev/null
check "PROTOCOL=kla --dry-run lists 192 runs (2 seeds) of the kla_protocol configs and trains nothing" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mad/kla_protocol/" "$W/dry_kla")" = 192 ] && [ ! -d "$W/kla/runs" ]'
check "PROTOCOL=kla sets run.seed and no min_lr_frac (constant lr)" \
    eval 'grep -q "run.name=kla__icr__lr1e-3_wd0_s2 " "$W/dry_kla" && grep "run.name=kla__icr__lr1e-3_wd0_s2 " "$W/dry_kla" | grep -q -- "--set run.seed=2 " && ! grep -q min_lr_frac "$W/dry_kla"'
cmd=$(grep "run.name=kla__icr__lr1e-3_wd0_s1 " "$W/dry_kla"); eval "$cmd --info" > "$W/info_kla" 2>/dev/null
cmd=$(grep "run.name=attn_rope__icr__lr1e-3_wd0_s1 " "$W/dry_kla"); eval "$cmd --info" > "$W/info_attn" 2>/dev/null
check "PROTOCOL=kla: one block, a fused KLA block (no MLP) for kla and attention + MLP for attention" \
    eval 'grep -q "^model .* 1 layers," "$W/info_kla" && grep -q "^| 0 | kla (no MLP) |" "$W/info_kla" &&
          grep -q "^model .* 1 layers," "$W/info_attn" && grep -q "^| 0 | attention |" "$W/info_attn" && ! grep -q "^| 1 |" "$W/info_attn"'
# SCALE=medium: 5 rows (attention, KLA, KLA p = 0, GLA, GDN) x 6 tasks x lr {2e-3}; batch 32, warmup, per-task
# epochs, evaluation every 200 steps on 8 batches with Zoology's stop at 0.99; JOBS defaults to nproc / 2 (at least 1), THREADS to 2
(unset JOBS THREADS; SCALE=medium SEQ_OUT=$W/med "$S" --dry-run > "$W/dry_med" 2> "$W/dry_med.err")
med_cfg() {  # med_cfg RUN: the resolved config of a medium run of the dry run, as JSON
    local c; c=$(grep "run.name=$1 " "$W/dry_med") || return 1
    eval "${c/ --set run.dir=/ --print-config --set run.dir=}" 2>/dev/null
}
check "SCALE=medium --dry-run lists 30 runs (5 rows x 6 tasks x lr 2e-3), 2 threads each, nproc / 2 at a time, trains nothing" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mad/" "$W/dry_med")" = 30 ] && [ ! -d "$W/med/runs" ] &&
          [ "$(grep -o "run.name=[a-z0-9_]*__icr__" "$W/dry_med" | sort | tr "\n" " ")" = "run.name=attn_rope__icr__ run.name=gdn__icr__ run.name=gla__icr__ run.name=kla__icr__ run.name=kla_p0__icr__ " ] &&
          [ "$(grep -c "lr2e-3_wd0 --set run.threads=2$" "$W/dry_med")" = 30 ] &&
          grep -q "JOBS=$(( $(nproc) > 1 ? $(nproc) / 2 : 1 )) THREADS=2" "$W/dry_med.err"'
check "SCALE=medium run configs: batch 32, lr 2e-3 with 100 warmup steps, cosine to 1e-6, the tasks' epochs, eval every 200 on 8 batches, stop at 0.99" \
    python3 - <(med_cfg attn_rope__icr__lr2e-3_wd0) <(med_cfg kla__selective_copy__lr2e-3_wd0) \
        <(med_cfg gdn__memorization__lr2e-3_wd0) <(med_cfg gla__compression__lr2e-3_wd0) <<'PY'
import json, sys
want_epochs = [8, 3, 100, 4]
want_examples = [12800, 12800, 256, 12800]
cfgs = [json.load(open(path)) for path in sys.argv[1:]]
for c, ep, nex in zip(cfgs, want_epochs, want_examples):
    t, o, s = c["train"], c["optim"], c["schedule"]
    assert t["batch_size"] == 32 and t["epochs"] == ep and t["eval_every"] == 200 and t["eval_batches"] == 8, t
    assert abs(t["stop_at_acc"] - 0.99) < 1e-12 and abs(o["lr"] - 2e-3) < 1e-12 and o["weight_decay"] == 0, (t, o)
    assert s["kind"] == "cosine" and s["warmup_steps"] == 100 and abs(s["min_lr_frac"] - 5e-4) < 1e-12, s
    task = c["data"]["task"]
    assert task["test_examples"] == 1280 and (task["train_examples"] == nex or task.get("n_train") == nex), task
assert len(cfgs) == 4 and cfgs[1]["model"]["mixer"]["kind"] == "kla", len(cfgs)
PY
check "SCALE=medium with PROTOCOL=kla exits 2" eval 'SCALE=medium PROTOCOL=kla SEQ_OUT=$O "$S" --dry-run 2>/dev/null; [ $? = 2 ]'
# the paper scale's resolved configs: Table 10's patience 70 on the test loss, evaluated every epoch (75 steps),
# and the compression decoder [240, 120]
PROTOCOL=kla SCALE=paper ROWS=kla TASKS=compression SEQ_OUT=$W/klap "$S" --dry-run > "$W/dry_klap" 2>/dev/null
cmd=$(grep "run.name=kla__compression__lr1e-3_wd0_s1 " "$W/dry_klap"); eval "$cmd --print-config" > "$W/cfg_klap" 2>/dev/null
check "PROTOCOL=kla paper: patience 70 on the loss every 75 steps, decoder widths 240 and 120, 5 seeds" python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
t, m = c["train"], c["model"]
assert (t["patience"], t["patience_metric"], t["eval_every"], t["batch_size"], t["epochs"]) == (70, "loss", 75, 172, 750), t
assert (m["ae_width1"], m["ae_width2"], m["head"], m["n_layers"]) == (240, 120, "autoencoder", 1), m
assert sum(1 for l in open(sys.argv[2]) if "--config configs/tasks/mad/kla_protocol/" in l) == 5' "$W/cfg_klap" "$W/dry_klap"
check "a bad PROTOCOL exits 2" eval 'PROTOCOL=maybe SEQ_OUT=$O "$S" --dry-run 2>/dev/null; [ $? = 2 ]'
check "SEEDS with PROTOCOL=mad exits 2" eval 'SEEDS=1 SEQ_OUT=$O "$S" --dry-run 2>/dev/null; [ $? = 2 ]'
cmd=$(grep "run.name=attn_rope__icr__" "$W/dry")
eval "$cmd --stop-after 1 --quiet" > /dev/null 2>&1; rc=$?
check "attn_rope/icr stopped after 1 of its 2 steps with a checkpoint (exit 130)" \
    eval '[ "$rc" = 130 ] && [ -f "$O/runs/attn_rope__icr__lr1e-3_wd0/ckpt-00000001/state.json" ]'

# --- the table
SEQ_OUT=$O "$S" > "$W/t.md" 2> "$W/t.err"; rc=$?
check "mad_table.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/    /' "$W/t.err" | tail -n 30
check "the Markdown on stdout is SEQ_OUT/mad_table.md" cmp -s "$W/t.md" "$O/mad_table.md"
check "columns: Mixer, the six MAD tasks, Avg" \
    grep -qx '| Mixer | ICR | Noisy ICR | Fuzzy ICR | Sel. Copy | Memorization | Compression | Avg |' "$W/t.md"
check "rows: the 16 mixers in order" diff <(printf '%s\n' "Attention (no PE)" "Attention (RoPE)" "Attention (ALiBi)" \
    "Attention (FoX)" "RFA" "SC-RFA" "KLA" "KLA (p = 0)" "KLA+" "GLA" "GLA + RoPE" "GLA + Selective RoPE" "Gated DeltaNet" \
    "Gated DeltaNet + Selective RoPE" "Mamba" "mLSTM") <(md_rows "$W/t.md" | cut -d'|' -f1)
# is every cell of table FILE an accuracy in [0, 1] with 4 decimals, and Avg the mean of the six (to rounding)?
cells_ok() {
    md_rows "$1" | awk -F'|' '
        NF != 8 { exit 1 }
        { s = 0
          for (i = 2; i <= 8; i++) if ($i !~ /^[01]\.[0-9][0-9][0-9][0-9]$/ || $i + 0 > 1) exit 1
          for (i = 2; i <= 7; i++) s += $i
          d = s / 6 - $8; if (d > 0.00051 || d < -0.00051) exit 1
          n++ }
        END { exit n == 16 ? 0 : 1 }'
}
check "every cell is an accuracy in [0, 1] and Avg is the mean of the six" cells_ok "$W/t.md"
check "provenance line and the compression note" \
    eval 'grep -q "^Generated by \`SCALE=tiny scripts/mad_table.sh\` on .*commit .*cores, JOBS=2, THREADS=1" "$W/t.md" && grep -q "^Compression is trained with MAD.s autoencoder" "$W/t.md"'
check "mad_table.csv: header and 16 rows with the Markdown's numbers" python3 -c '
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
assert r[0] == ["id", "mixer", "icr", "noisy_icr", "fuzzy_icr", "selective_copy", "memorization", "compression", "average"], r[0]
assert len(r) == 17 and all(len(x) == 9 for x in r), r
md = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:9]] for l in open(sys.argv[2]) if l.startswith("| ") and not l.startswith("| Mixer")}
for x in r[1:]:
    assert md[x[1]] == x[2:], (x, md.get(x[1]))
    assert all(0 <= float(v) <= 1 for v in x[2:])' "$O/mad_table.csv" "$W/t.md"
check "each cell's run wrote eval/acc.json" eval '[ "$(ls "$O"/runs/*/eval/acc.json | wc -l)" = 96 ]'
check "the interrupted run was resumed, not restarted" grep -q "attn_rope__icr__lr1e-3_wd0: resuming" "$W/t.err"
check "the long runs start first: the first 10 runs started are selective copy" \
    eval '[ "$(grep -E "\] [a-z0-9_]+__[a-z_]+__lr[^ ]*: (training|resuming)" "$W/t.err" | head -n 10 | grep -c "__selective_copy__")" = 10 ]'
check "rows trained their mixer (FoX pos, SC-RFA with the SDE group, KLA p = 0, KLA+ 10 samples)" \
    eval 'grep -q "\"pos\":.\"fox\"" "$O/runs/attn_fox__memorization__lr1e-3_wd0/config.json" && grep -q "\"spectral_coupling\":.true" "$O/runs/sc_rfa__icr__lr1e-3_wd0/config.json" && grep -q "mixer.sde_" "$O/runs/sc_rfa__icr__lr1e-3_wd0/config.json" && grep -q "\"process_noise\":.false" "$O/runs/kla_p0__icr__lr1e-3_wd0/config.json" && grep -q "\"mc_samples\":.10" "$O/runs/kla_plus__icr__lr1e-3_wd0/config.json"'

check "the Selective RoPE rows: the paper's MAD GLA (8 heads, expand_k 1) with rank-32 Selective RoPE, GDN with 8 heads" \
    eval 'grep -q "\"phi_proj_rank\":.32" "$O/runs/gla_selrope__icr__lr1e-3_wd0/config.json" && grep -q "\"expand_k\":.1," "$O/runs/gla_selrope__icr__lr1e-3_wd0/config.json" && ! grep -q "\"enabled\":.true" "$O/runs/gla__icr__lr1e-3_wd0/config.json" && grep -q "\"enabled\":.true" "$O/runs/gdn_selrope__icr__lr1e-3_wd0/config.json" && grep -q "\"kind\":.\"gated_deltanet\"" "$O/runs/gdn__icr__lr1e-3_wd0/config.json"'

check "the Fig. 5a baselines: Mamba (d_state 16, expand 1) and mLSTM (16 heads, proj_factor 2)" \
    eval 'grep -q "\"kind\":.\"mamba\"" "$O/runs/mamba__icr__lr1e-3_wd0/config.json" && grep -q "\"expand\":.1" "$O/runs/mamba__icr__lr1e-3_wd0/config.json" && grep -q "\"heads\":.16" "$O/runs/mlstm__icr__lr1e-3_wd0/config.json"'

check "compression trained the autoencoder head (and only compression)" \
    eval 'grep -q "\"head\":.\"autoencoder\"" "$O/runs/kla__compression__lr1e-3_wd0/config.json" && grep -q "\"head\":.\"lm\"" "$O/runs/kla__icr__lr1e-3_wd0/config.json"'

# --- a second call reuses every finished run
SEQ_OUT=$O "$S" > "$W/t2.md" 2> "$W/t2.err"; rc=$?
check "a second call reuses all 96 finished runs" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "finished earlier, reused" "$W/t2.err")" = 96 ] && ! grep -q ": training" "$W/t2.err"'
check "... and prints the same table" diff <(md_rows "$W/t.md") <(md_rows "$W/t2.md")
check "the GLA + RoPE row rotates (the complex forget gate), the GLA row does not" \
    eval 'grep -q "\"rotate\":.true" "$O/runs/gla_rope__icr__lr1e-3_wd0/config.json" && ! grep -q "\"rotate\":.true" "$O/runs/gla__icr__lr1e-3_wd0/config.json"'

# --- VARIANTS=all: MAD's 66 task settings (the Selective RoPE paper's App. B.2.1), a cell the mean over a task's
# settings of the best over the grid
VARIANTS=all SCALE=paper ROWS=gla LRS=1e-3 WDS=0 SEQ_OUT=$W/var "$S" --dry-run > "$W/dry_var" 2>/dev/null
check "VARIANTS=all paper --dry-run: 66 settings for one row and grid point, each task's count MAD's" python3 -c '
import collections, re, sys
names = re.findall(r"run.name=gla__([a-z_]+)(?:-([A-Za-z]+[0-9.]+))?__lr", open(sys.argv[1]).read())
n = collections.Counter(t for t, _ in names)
assert len(names) == 66 and n == {"icr": 11, "noisy_icr": 14, "fuzzy_icr": 11, "selective_copy": 13, "memorization": 6, "compression": 11}, n' "$W/dry_var"
check "VARIANTS=all: a variant changes one setting (noisy ICR frac_noise 0.6, selective copy 96 tokens)" \
    eval 'grep "run.name=gla__noisy_icr-noise0.6__lr1e-3_wd0 " "$W/dry_var" | grep -q -- "--set data.task.frac_noise=0.6 " &&
          grep "run.name=gla__selective_copy-copy96__lr1e-3_wd0 " "$W/dry_var" | grep -q -- "--set data.task.n_copy=96 "'
check "VARIANTS with PROTOCOL=kla, or a bad value, exits 2" \
    eval 'VARIANTS=all PROTOCOL=kla SEQ_OUT=$W/v2 "$S" --dry-run 2>/dev/null; [ $? = 2 ] && { VARIANTS=some SEQ_OUT=$W/v2 "$S" --dry-run 2>/dev/null; [ $? = 2 ]; }'
VARIANTS=all ROWS=gla TASKS=memorization SEQ_OUT=$W/var "$S" > "$W/var.md" 2> "$W/var.err"; rc=$?
check "VARIANTS=all SCALE=tiny: the cell is the mean of the task's 6 settings' accuracies" python3 -c '
import glob, json, sys
row = [l for l in open(sys.argv[1]) if l.startswith("| GLA |")][0].split("|")[2:3]
for task, cell, n in (("memorization", row[0], 6),):
    a = [json.load(open(f))["accuracy"] for f in glob.glob(sys.argv[2] + "/gla__" + task + "[-_]*/eval/acc.json")]
    assert len(a) == n and abs(sum(a) / n - float(cell)) < 6e-5, (task, cell, a)' "$W/var.md" "$W/var/runs"

test_done
