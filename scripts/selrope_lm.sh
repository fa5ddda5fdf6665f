#!/usr/bin/env bash
# The Selective RoPE paper's language-model comparison (§4.3, Table 2) as test perplexity by
# context length: GLA, Gated DeltaNet and FoX, each without position encoding and with Selective RoPE, trained
# at one length and scored at 1x-8x it. Run `scripts/selrope_lm.sh --help` for the options.
USAGE="usage: [SCALE=tiny|small|paper] [ROWS=id,id] [SEQ_OUT=DIR] [JOBS=N] [THREADS=N] scripts/selrope_lm.sh [--set KEY=VALUE ...] [--dry-run]

Trains the rows (GLA, Gated DeltaNet, FoX, each ± Selective RoPE) that are not finished yet and prints their
test perplexity by context length, as Markdown on stdout and in SEQ_OUT/selrope_lm.md, and as CSV in
SEQ_OUT/selrope_lm.csv.

  SCALE=tiny    a pipeline check: 2 layers, d 32, 2 heads, 4 steps, T 32, L 32-256 (all rows in seconds)
  SCALE=small   configs/lm/cpu/{gla,gated_deltanet,gpt}.json (gpt with pos fox): 4 layers, d 128, 4 heads,
                T 256, 1 epoch of WikiText-2, L 256-2048  (default)
  SCALE=paper   configs/lm/selrope/*_370m.json: the paper's 370M recipe (24 x d1024, T 4096, 128 x 4096
                tokens per step, 66,758 steps = 35B tokens, AdamW 0.9/0.95, wd 0.1, clip 1, cosine with 10%
                warmup to 1e-4), L 4096-16384. The data is the bundled WikiText-2, not the paper's FineWeb
                with the Mistral tokenizer (not bundled): point data.* at other shards with --set
  ROWS=id,...   only these rows (default all): gla gla_selrope gdn gdn_selrope fox fox_selrope
  SEQ_OUT=DIR   output folder (default runs/selrope/SCALE/lm): runs/<id>/, logs/<id>.log, selrope_lm.md|csv
  JOBS, THREADS, BIN, PROGRESS_EVERY   as in scripts/lib/runq.sh
  --set K=V     an extra seqtrain override for every row (e.g. --set train.steps=150)
  --dry-run     resolve and check every config, print what would run, train nothing

Selective RoPE is the option's defaults (rank 16, conv over φ, no gate or bias, θ 500000): the paper's
'Selective RoPE' rows, not its '+ phase gate' / '+ bias' variants (--set model.mixer.selective_rope.use_gate=true
and so on give those, in another SEQ_OUT). Resumable: finished rows are reused, interrupted ones resumed.
Exit status: 0 every row has its numbers, 1 some row failed, 2 bad usage, 130/143 interrupted."
source "$(dirname "${BASH_SOURCE[0]}")/lib/ppl_table.sh"

parse_opts "$@"
# the lm part of scripts/selrope_tables.sh's folder
[ -n "${SEQ_OUT:-}" ] || SEQ_OUT="$ROOT/runs/selrope/${SCALE:-small}/lm"
setup runs/selrope
need_wikitext2

# --- hooks of scripts/lib/ppl_table.sh: the LM configs by scale, the tiny model, the table's scale lines
ppl_config_path() {
    case "$SCALE" in
        paper) printf 'configs/lm/selrope/%s_370m.json\n' "$1" ;;
        *)     [ "$1" = fox ] && set -- gpt; printf 'configs/lm/cpu/%s.json\n' "$1" ;;
    esac
}
ppl_scale_sets() {
    [ "$SCALE" = tiny ] || return 0
    printf '%s\n' model.d_model=32 model.n_layers=2 model.mixer.heads=2 train.batch_size=2 train.seq_len=32 \
        train.steps=4 train.eval_every=0 train.eval_batches=1 train.ckpt_every=0 eval.contexts=32,64,128,256 \
        eval.max_windows=2
}
ppl_scale_note() {
    case "$SCALE" in
        paper) echo "Scale \`paper\`: the paper's 370M recipe (configs/lm/selrope/*_370m.json), trained at T = $1, test perplexity at L = ${2//,/, }." ;;
        small) echo "Scale \`small\`: CPU-sized configs (configs/lm/cpu/: 4 layers, d = 128, 4 heads), trained at T = $1;" \
                    "L = ${2//,/, } are 1×, 2×, 4×, 8× the training length." ;;
        tiny)  echo "Scale \`tiny\`: a pipeline check (2 layers, d = 32, 4 steps, T = $1, L = ${2//,/, }, 2 windows per length); the numbers mean nothing." ;;
    esac
}
PPL_DATA_NOTE="Perplexities are not comparable with the paper's (FineWeb, Mistral tokenizer, 35B tokens)."

SR=model.mixer.selective_rope.enabled=true
#     id           label                              config name       kind         csv key          sets
rows_=(
    "gla|GLA (NoPE)|gla|gla|gla"
    "gla_selrope|GLA + Selective RoPE|gla|gla|gla_selrope|$SR"
    "gdn|Gated DeltaNet (NoPE)|gated_deltanet|gated_deltanet|gdn"
    "gdn_selrope|Gated DeltaNet + Selective RoPE|gated_deltanet|gated_deltanet|gdn_selrope|$SR"
    "fox|FoX (NoPE)|fox|attention|fox|model.mixer.pos=fox"
    "fox_selrope|FoX + Selective RoPE|fox|attention|fox_selrope|model.mixer.pos=fox|$SR"
)
ROWS=${ROWS:-}
ppl_rows_select "${rows_[@]}"
ppl_main selrope_lm \
    "**Selective RoPE, language modelling.** Test perplexity by context length L (trained at the first L)." \
    Model model ROWS
