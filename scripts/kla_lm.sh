#!/usr/bin/env bash
# The KLA paper's language models (Table 4 / Table 13 / App. G.6: GPT, Mamba, GDN, KLA and the hybrids GPT+KLA,
# GPT+Mamba, GPT+GDN of Fig. 1b, at the 45M and 180M recipes) as test perplexity by context length, every length
# scored on the whole test split. Run `scripts/kla_lm.sh --help`.
USAGE="usage: [SCALE=tiny|small|paper] [ROWS=id,id] [SEQ_OUT=DIR] [JOBS=N] [THREADS=N] scripts/kla_lm.sh [--set KEY=VALUE ...] [--dry-run]

Trains the rows that are not finished yet and prints their test perplexity by context length, as Markdown on
stdout and in SEQ_OUT/kla_lm.md, and as CSV in SEQ_OUT/kla_lm.csv. Every length is scored on the
whole test split (eval.max_windows 0), so the columns differ in context only, never in the text they score
(the configs' own eval.max_windows 64 scores the first 64 windows, a different slice of the test split at
each length).

The rows are Table 4's (standalone GPT, Mamba, GDN, KLA; the hybrid GPT+KLA) and Fig. 1b's hybrids (GPT+Mamba,
GPT+GDN: the last attention layer replaced), each at the 45M recipe (ids gpt, mamba, gdn, kla, gpt_kla,
gpt_mamba, gpt_gdn) and at the 180M one (the same ids with _180m). Mamba (Mamba-1, expand 2) and GDN (Gated
DeltaNet + MLP, expand_k 0.5, expand_v 1, heads d/128) hold the state of the KLA layer they stand beside
(G.3's convention: 2 x d x d_state floats a layer, d_state 32 at paper scale, 16 below); the GPT, Mamba and
GDN widths are ours, chosen to land on the paper's sizes (the paper publishes KLA's only, Table 13).

  SCALE=tiny    a pipeline check: 2 layers, d 32, 4 steps, T 32, L 32-256 on 2 windows (all rows in seconds)
  SCALE=small   configs/lm/cpu/<id>.json: 4 layers of d 128 (the _180m rows 6 x d 192), T 256, one epoch of
                WikiText-2 (690 steps of 16 x 256), L 256-2048  (default). The mamba row is
                configs/lm/cpu/mamba.json, whose A_log and dt_bias train at the full lr (the other rows' SSM
                parameters at 0.1x, as Table 13)
  SCALE=paper   configs/<id>_45m.json and configs/<id>_180m.json: Table 13's 45M / 180M recipe, T 2048,
                L 512-4096; parameters (seqtrain --info): GPT 46.4M / 174.3M, Mamba 45.5M / 177.9M, GDN
                46.5M / 174.6M, KLA 43.1M / 164.0M, GPT+KLA 45.2M / 167.5M, GPT+Mamba 45.6M / 169.9M,
                GPT+GDN 46.4M / 174.4M. The data is the bundled WikiText-2, not the paper's FineWeb-Edu (not
                bundled), and the paper's Table 4 numbers are zero-shot accuracies (scripts/zeroshot_table.sh),
                not these perplexities
  ROWS=id,...   only these rows (default all 14): gpt mamba gdn kla gpt_kla gpt_mamba gpt_gdn and the same
                with _180m
  SEQ_OUT=DIR   output folder (default runs/kla_lm/SCALE): runs/<id>/, logs/<id>.log, kla_lm.md|csv
  JOBS, THREADS, BIN, PROGRESS_EVERY   as in scripts/lib/runq.sh
  --set K=V     an extra seqtrain override for every row
  --dry-run     resolve and check every config, print what would run, train nothing

Resumable: finished rows are reused, interrupted ones resumed.
Exit status: 0 every row has its numbers, 1 some row failed, 2 bad usage, 130/143 interrupted."
source "$(dirname "${BASH_SOURCE[0]}")/lib/ppl_table.sh"

parse_opts "$@"
setup runs/kla_lm
need_wikitext2

# --- hooks of scripts/lib/ppl_table.sh: the configs by scale, the whole test split, the tiny model, the scale lines
ppl_config_path() {
    case "$SCALE" in
        paper) case "$1" in *_180m) printf 'configs/%s.json\n' "$1" ;; *) printf 'configs/%s_45m.json\n' "$1" ;; esac ;;
        *)     printf 'configs/lm/cpu/%s.json\n' "$1" ;;
    esac
}
ppl_scale_sets() {  # KIND: attention or gdn (heads to set at tiny), gpt_gdn (also the GDN layer's), kla, mamba
    if [ "$SCALE" != tiny ]; then echo eval.max_windows=0; return 0; fi
    printf '%s\n' model.d_model=32 model.n_layers=2 train.batch_size=2 train.grad_accum=1 train.seq_len=32 \
        train.steps=4 train.eval_every=0 train.eval_batches=1 train.ckpt_every=0 eval.contexts=32,64,128,256 \
        eval.max_windows=2
    case "$1" in attention|gdn) echo model.mixer.heads=2 ;; gpt_gdn) printf '%s\n' model.mixer.heads=2 'model.layers[0].mixer.heads=2' ;; esac
    return 0
}
ppl_scale_note() {
    case "$SCALE" in
        paper) echo "Scale \`paper\`: Table 13's recipe (configs/<id>_45m.json, configs/<id>_180m.json) on WikiText-2, trained at T = $1; L = ${2//,/, }, each on the whole test split." ;;
        small) echo "Scale \`small\`: CPU-sized configs (configs/lm/cpu/: 4 layers of d = 128, the _180m rows 6 of d = 192, one epoch of WikiText-2), trained at T = $1;" \
                    "L = ${2//,/, } (1×, 2×, 4×, 8× the training length), each on the whole test split (eval.max_windows 0)." ;;
        tiny)  echo "Scale \`tiny\`: a pipeline check (2 layers, d = 32, 4 steps, T = $1, L = ${2//,/, }, 2 windows per length); the numbers mean nothing." ;;
    esac
}
PPL_DATA_NOTE="Perplexities are not comparable with the paper's (FineWeb-Edu, the nanochat tokenizer, 1.8B / 10.9B tokens)."

# Table 4's rows in its order, then Fig. 1b's hybrids, at 45M and then 180M
#     id               label                                            config name      kind     csv key
rows_=(
    "gpt|GPT (attention + MLP, RoPE)|gpt|attention|gpt"
    "mamba|Mamba (Mamba-1 blocks)|mamba|mamba|mamba"
    "gdn|GDN (Gated DeltaNet + MLP)|gdn|gdn|gdn"
    "kla|KLA (fused KLA blocks)|kla|kla|kla"
    "gpt_kla|GPT+KLA (last layer a fused KLA block)|gpt_kla|attention|gpt_kla"
    "gpt_mamba|GPT+Mamba (last layer a Mamba block)|gpt_mamba|attention|gpt_mamba"
    "gpt_gdn|GPT+GDN (last layer a GDN layer)|gpt_gdn|gpt_gdn|gpt_gdn"
    "gpt_180m|GPT, 180M recipe|gpt_180m|attention|gpt_180m"
    "mamba_180m|Mamba, 180M recipe|mamba_180m|mamba|mamba_180m"
    "gdn_180m|GDN, 180M recipe|gdn_180m|gdn|gdn_180m"
    "kla_180m|KLA, 180M recipe|kla_180m|kla|kla_180m"
    "gpt_kla_180m|GPT+KLA, 180M recipe|gpt_kla_180m|attention|gpt_kla_180m"
    "gpt_mamba_180m|GPT+Mamba, 180M recipe|gpt_mamba_180m|attention|gpt_mamba_180m"
    "gpt_gdn_180m|GPT+GDN, 180M recipe|gpt_gdn_180m|gpt_gdn|gpt_gdn_180m"
)
ROWS=${ROWS:-}
ppl_rows_select "${rows_[@]}"
ppl_main kla_lm \
    "**KLA language models.** Test perplexity by context length L (trained at the first L), every L on the whole test split." \
    Model model ROWS
