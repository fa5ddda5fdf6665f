#!/usr/bin/env bash
# Table 1 of the RFA paper (Racioppo, "Robust Filter Attention"): test perplexity by context length of the
# positional baselines B1-B4, RFA (M1), SC-RFA (M2) and the structural ablations M2.1-M2.6, all trained at
# one length and evaluated at 1x, 2x, 4x and 8x it. Run `scripts/rfa_table1.sh --help` for the options.
USAGE="usage: [SCALE=tiny|small|paper] [SEQ_OUT=DIR] [JOBS=N] [THREADS=N] scripts/rfa_table1.sh [--set KEY=VALUE ...] [--dry-run]

Trains the 12 rows of the RFA paper's Table 1 (B1-B4, M1, M2, M2.1-M2.6; configs/rfa/) on the bundled
WikiText-2 (make data) and prints their test perplexity at 4 context lengths in the paper's layout, as
Markdown on stdout and in SEQ_OUT/table1.md, and as CSV in SEQ_OUT/table1.csv.

  SCALE=tiny    a pipeline check: 2 layers, d 32, 4 steps, T 32, L 32-256 (all rows in seconds)
  SCALE=small   configs/rfa/cpu/*.json: 4 layers, d 128, 1 epoch, T 256, L 256-2048  (default)
  SCALE=paper   configs/rfa/*.json: the paper protocol, 6 layers, d 256, 15 epochs, T 512, L 512-4096
  SEQ_OUT=DIR       output folder (default runs/rfa_tables/SCALE): runs/<id>/ (one run directory per row),
                logs/<id>.log, table1.md, table1.csv
  JOBS=N        trainings at the same time, each its own process (default: tiny nproc, else 1); with
                JOBS > 1 OMP_WAIT_POLICY=passive is set
  THREADS=N     run.threads of each training (default nproc / JOBS, at least 1)
  BIN=DIR       the seqtrain build to use (default bin; built with make tools when missing)
  PROGRESS_EVERY=S  print the running trainings' progress every S seconds (default 60; 0 = off)
  --set K=V     an extra seqtrain override for every row (e.g. --set optim.lr=5e-4)
  --dry-run     resolve and check every config, print what would run, train nothing

Resumable: a row whose run directory already holds its final table is reused, an interrupted one
(Ctrl-C, a crash, a kill) is continued with seqtrain --resume; run the same command again. A run
directory made with another configuration is never touched (the row fails with the differences).
Rows share run directories with scripts/rfa_table2.sh (M2 = the b = 5e-2 row) when SEQ_OUT is the same.
Exit status: 0 every row has its numbers, 1 some row failed (the table says which), 2 bad usage,
130/143 interrupted."
source "$(dirname "${BASH_SOURCE[0]}")/lib/ppl_table.sh"

parse_opts "$@"
setup runs/rfa_tables
need_wikitext2

#       id                  label in the paper's Table 1   config name          mixer
ppl_row b1_rope             "RoPE (B1)"                    b1_rope              attention
ppl_row b2_alibi            "ALiBi (B2)"                   b2_alibi             attention
ppl_row b3_decayed_rope     "Decayed RoPE (B3)"            b3_decayed_rope      attention
ppl_row b4_sc_rope          "SC-RoPE (B4)"                 b4_sc_rope           attention
ppl_row m1_rfa              "RFA (M1)"                     m1_rfa               rfa
ppl_row m2_sc_rfa           "SC-RFA (M2)"                  m2_sc_rfa            rfa
ppl_separator "Structural Ablations (Relative to M2)"
ppl_row m2_1_gaussian       "Gaussian NLL (M2.1)"          m2_1_gaussian        rfa
ppl_row m2_2_flat_prior     "Flat Prior (M2.2)"            m2_2_flat_prior      rfa
ppl_row m2_3_no_mult_gate   "No Mult. Gate (M2.3)"         m2_3_no_mult_gate    rfa
ppl_row m2_4_no_value_rot   "No Value Rot. (M2.4)"         m2_4_no_value_rot    rfa
ppl_row m2_5_no_rotations   "No Rotations (M2.5)"          m2_5_no_rotations    rfa
ppl_row m2_6_pure_rotation  "Pure Rotation (M2.6)"         m2_6_pure_rotation   rfa

ppl_main table1 "**Table 1.** Long-context extrapolation (test perplexity by context length L; RFA paper layout)."
