#!/usr/bin/env bash
# The KLA paper's language models (Table 13 / App. G.6: GPT, GPT+KLA, KLA, and KLA at the 180M recipe) as test
# perplexity by context length, every length scored on the whole test split. Run `scripts/kla_lm.sh --help`.
USAGE="usage: [SCALE=tiny|small|paper] [ROWS=id,id] [SEQ_OUT=DIR] [JOBS=N] [THREADS=N] scripts/kla_lm.sh [--set KEY=VALUE ...] [--dry-run]

Trains the rows (gpt, gpt_kla, kla, kla_180m) that are not finished yet and prints their test perplexity by
context length, as Markdown on stdout and in SEQ_OUT/kla_lm.md, and as CSV in SEQ_OUT/kla_lm.csv. Every
length is scored on the whole test split (eval.max_windows 0), so the columns differ in context only, never in
the text they score (the configs' own eval.max_windows 64 scores the first 64 windows, a different slice of
the test split at each length).

  SCALE=tiny    a pipeline check: 2 layers, d 32, 4 steps, T 32, L 32-256 on 2 windows (all rows in seconds)
  SCALE=small   configs/lm/cpu/{gpt,gpt_kla,kla,kla_180m}.json: 4 layers of d 128 (kla_180m: 6 x d192), T 256,
                one epoch of WikiText-2 (690 steps of 16 x 256), L 256-2048  (default)
  SCALE=paper   configs/{gpt_45m,gpt_kla_45m,kla_45m,kla_180m}.json: Table 13's 45M / 180M recipe, T 2048,
                L 512-4096. The data is the bundled WikiText-2, not the paper's FineWeb-Edu (not bundled)
  ROWS=id,...   only these rows (default all): gpt gpt_kla kla kla_180m
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
        paper) case "$1" in kla_180m) echo configs/kla_180m.json ;; *) printf 'configs/%s_45m.json\n' "$1" ;; esac ;;
        *)     printf 'configs/lm/cpu/%s.json\n' "$1" ;;
    esac
}
ppl_scale_sets() {  # KIND: attention (gpt, gpt_kla: attention heads to set at tiny) or kla
    if [ "$SCALE" != tiny ]; then echo eval.max_windows=0; return 0; fi
    printf '%s\n' model.d_model=32 model.n_layers=2 train.batch_size=2 train.grad_accum=1 train.seq_len=32 \
        train.steps=4 train.eval_every=0 train.eval_batches=1 train.ckpt_every=0 eval.contexts=32,64,128,256 \
        eval.max_windows=2
    [ "$1" = attention ] && echo model.mixer.heads=2
    return 0
}
ppl_scale_note() {
    case "$SCALE" in
        paper) echo "Scale \`paper\`: Table 13's recipe (configs/{gpt_45m,gpt_kla_45m,kla_45m,kla_180m}.json) on WikiText-2, trained at T = $1; L = ${2//,/, }, each on the whole test split." ;;
        small) echo "Scale \`small\`: CPU-sized configs (configs/lm/cpu/: 4 layers of d = 128, kla_180m 6 of d = 192, one epoch of WikiText-2), trained at T = $1;" \
                    "L = ${2//,/, } (1×, 2×, 4×, 8× the training length), each on the whole test split (eval.max_windows 0)." ;;
        tiny)  echo "Scale \`tiny\`: a pipeline check (2 layers, d = 32, 4 steps, T = $1, L = ${2//,/, }, 2 windows per length); the numbers mean nothing." ;;
    esac
}
PPL_DATA_NOTE="Perplexities are not comparable with the paper's (FineWeb-Edu, the nanochat tokenizer, 1.8B / 10.9B tokens)."

#     id         label                                   config name  kind       csv key
rows_=(
    "gpt|GPT (attention + MLP, RoPE)|gpt|attention|gpt"
    "gpt_kla|GPT+KLA (last layer a fused KLA block)|gpt_kla|attention|gpt_kla"
    "kla|KLA (fused KLA blocks)|kla|kla|kla"
    "kla_180m|KLA, kla_180m recipe|kla_180m|kla|kla_180m"
)
ROWS=${ROWS:-}
ppl_rows_select "${rows_[@]}"
ppl_main kla_lm \
    "**KLA language models.** Test perplexity by context length L (trained at the first L), every L on the whole test split." \
    Model model ROWS
