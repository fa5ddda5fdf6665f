#!/usr/bin/env bash
# Table 2 of the RFA paper (Racioppo, "Robust Filter Attention"): SC-RFA (M2) trained with the damping
# coefficient b in {5e-4, 5e-3, 5e-2, 5e-1, 5}; test perplexity at 1x, 2x, 4x and 8x the training length.
# Run `scripts/rfa_table2.sh --help` for the options.
USAGE="usage: [SCALE=tiny|small|paper] [SEQ_OUT=DIR] [JOBS=N] [THREADS=N] scripts/rfa_table2.sh [--set KEY=VALUE ...] [--dry-run]

Trains SC-RFA (M2, configs/rfa/m2_sc_rfa.json) with damping b = 5e-4, 5e-3, 5e-2, 5e-1 and 5
(--set model.mixer.damping=B) on the bundled WikiText-2 (make data) and prints the test perplexity at
4 context lengths in the layout of the paper's Table 2, as Markdown on stdout and in SEQ_OUT/table2.md, and
as CSV in SEQ_OUT/table2.csv.

  SCALE=tiny    a pipeline check: 2 layers, d 32, 4 steps, T 32, L 32-256 (all rows in seconds)
  SCALE=small   configs/rfa/cpu/m2_sc_rfa.json: 4 layers, d 128, 1 epoch, T 256, L 256-2048  (default)
  SCALE=paper   configs/rfa/m2_sc_rfa.json: the paper protocol, 6 layers, d 256, 15 epochs, T 512, L 512-4096
  SEQ_OUT=DIR       output folder (default runs/rfa_tables/SCALE): runs/<id>/, logs/<id>.log, table2.md, table2.csv
  JOBS=N        trainings at the same time, each its own process (default: tiny nproc, else 1); with
                JOBS > 1 OMP_WAIT_POLICY=passive is set
  THREADS=N     run.threads of each training (default nproc / JOBS, at least 1)
  BIN=DIR       the seqtrain build to use (default bin; built with make tools when missing)
  PROGRESS_EVERY=S  print the running trainings' progress every S seconds (default 60; 0 = off)
  --set K=V     an extra seqtrain override for every row
  --dry-run     resolve and check every config, print what would run, train nothing

The b = 5e-2 row is M2 itself: it is the run directory runs/m2_sc_rfa that scripts/rfa_table1.sh uses
with the same SEQ_OUT, so it is trained once for both tables. Resumable like rfa_table1.sh: finished rows
are reused, interrupted ones resumed; run the same command again.
Exit status: 0 every row has its numbers, 1 some row failed, 2 bad usage, 130/143 interrupted."
source "$(dirname "${BASH_SOURCE[0]}")/lib/ppl_table.sh"

parse_opts "$@"
setup runs/rfa_tables
need_wikitext2

#       id                label       config     mixer  b (CSV)  override
ppl_row m2_sc_rfa_b5e-4   "5×10⁻⁴"    m2_sc_rfa  rfa    0.0005   model.mixer.damping=5e-4
ppl_row m2_sc_rfa_b5e-3   "5×10⁻³"    m2_sc_rfa  rfa    0.005    model.mixer.damping=5e-3
ppl_row m2_sc_rfa         "5×10⁻²"    m2_sc_rfa  rfa    0.05     model.mixer.damping=5e-2
ppl_row m2_sc_rfa_b5e-1   "5×10⁻¹"    m2_sc_rfa  rfa    0.5      model.mixer.damping=5e-1
ppl_row m2_sc_rfa_b5      "5×10⁰"     m2_sc_rfa  rfa    5        model.mixer.damping=5

ppl_main table2 "**Table 2.** Sensitivity to the damping coefficient b of SC-RFA (M2) (test perplexity by context length L; RFA paper layout)." \
    "Damping (b)" damping
