#!/usr/bin/env bash
# Table 3 of the RFA paper (Racioppo, "Robust Filter Attention"): the main rows (B1, B2, M1, M2) on a
# second corpus (the paper: BabyLM-2025 Strict, which is not bundled). Run `scripts/rfa_table3.sh --help`.
USAGE="usage: [SCALE=tiny|small|paper] [SEQ_OUT=DIR] [JOBS=N] [THREADS=N] scripts/rfa_table3.sh CORPUS [--set KEY=VALUE ...] [--dry-run]

Trains RoPE (B1), ALiBi (B2), RFA (M1) and SC-RFA (M2) (configs/rfa/) on the corpus CORPUS and prints
their test perplexity at 4 context lengths in the layout of the paper's Table 3, as Markdown on stdout
and in SEQ_OUT/table3-NAME.md, and as CSV in SEQ_OUT/table3-NAME.csv (NAME: the corpus folder's or file's name).

The paper's Table 3 corpus, BabyLM-2025 (Strict), is NOT bundled with seqtrain: download it yourself and
encode it into shards, e.g. with the bundled tokenizer (or train one with bin/seqtok train):
    bin/seqtok encode --model data/tokenizer/wikitext2_bpe8192.model --input babylm_train.txt --output babylm/train.shard
    (the same for valid.shard and test.shard; cp data/tokenizer/wikitext2_bpe8192.model babylm/)
    scripts/rfa_table3.sh babylm
To try the script on the bundled WikiText-2 instead: scripts/rfa_table3.sh build/data/wikitext2 (make data).

CORPUS is either
  a folder      with the shards of the three splits, found by name: *train*.shard|*train*.bin (required),
                *val*.shard|*val*.bin (optional; valid.shard matches), *test*.shard|*test*.bin (required),
                several files of a split are all used; a single *.model in the folder is taken as the
                SentencePiece tokenizer of the shards (checked against their hash), none = no check
  a .json file  {\"name\": \"BabyLM-2025 (Strict)\", \"data\": {\"train\": ..., \"val\": ..., \"test\": ...,
                \"tokenizer\": ..., \"format\": ..., \"vocab_size\": ...}}: the keys of seqtrain's data section
                (docs/config.md; globs and lists allowed), relative paths relative to the .json file; keys
                left out take seqtrain's defaults (no val, no tokenizer check, format auto), never
                WikiText-2's. \"name\" (optional) titles the table.

  SCALE=tiny    a pipeline check: 2 layers, d 32, 4 steps, T 32, L 32-256 (all rows in seconds)
  SCALE=small   configs/rfa/cpu/*.json: 4 layers, d 128, 1 epoch, T 256, L 256-2048  (default)
  SCALE=paper   configs/rfa/*.json: the paper protocol, 6 layers, d 256, 15 epochs, T 512, L 512-4096
  SEQ_OUT=DIR       output folder (default runs/rfa_tables/SCALE): runs-NAME/<id>/, logs-NAME/<id>.log,
                table3-NAME.md, table3-NAME.csv
  JOBS=N        trainings at the same time, each its own process (default: tiny nproc, else 1); with
                JOBS > 1 OMP_WAIT_POLICY=passive is set
  THREADS=N     run.threads of each training (default nproc / JOBS, at least 1)
  BIN=DIR       the seqtrain build to use (default bin; built with make tools when missing)
  PROGRESS_EVERY=S  print the running trainings' progress every S seconds (default 60; 0 = off)
  --set K=V     an extra seqtrain override for every row, e.g. --set train.eval_every=2000
                --set train.ckpt_every=2000 (the configs validate and checkpoint every 345 steps, one
                WikiText-2 epoch at the paper scale)
  --dry-run     resolve and check every config, print what would run, train nothing

The number of steps follows the corpus (15 epochs at the paper scale, 1 at small). Resumable like
rfa_table1.sh: finished rows are reused, interrupted ones resumed; run the same command again.
Exit status: 0 every row has its numbers, 1 some row failed, 2 bad usage (no corpus), 130/143 interrupted."
source "$(dirname "${BASH_SOURCE[0]}")/lib/ppl_table.sh"

parse_opts --args "$@"
if [ "${#ARGS[@]}" = 0 ]; then
    echo "${USAGE%%$'\n'*}" >&2
    DIE_RC=2 die "no corpus given. Table 3 is on BabyLM-2025 (Strict), which is not bundled: encode it (or any second corpus) into train/valid/test shards and pass their folder or a corpus .json; to try the script, pass build/data/wikitext2 (--help for more)"
fi
[ "${#ARGS[@]}" = 1 ] || { echo "$USAGE" >&2; DIE_RC=2 die "one CORPUS expected, got ${#ARGS[*]} arguments"; }
CORPUS=$(realpath -m -- "$(abspath "${ARGS[0]}")")
setup runs/rfa_tables
[ "$CORPUS" = "$ROOT/build/data/wikitext2" ] && need_wikitext2   # the bundled corpus, as a stand-in
[ -e "$CORPUS" ] || DIE_RC=2 die "corpus '${ARGS[0]}' does not exist"

# JSON string literal of $1 (paths for --set data.train=[...])
json_str() {
    local s=$1
    s=${s//\\/\\\\}; s=${s//\"/\\\"}
    printf '"%s"' "$s"
}

# a JSON list of the files of a folder matching the globs, in name order ("" when none)
files_json_() {
    local d=$1 f out="" seen=" "; shift
    local g
    for g in "$@"; do
        for f in "$d"/$g; do
            [ -f "$f" ] || continue
            case "$seen" in *" $f "*) continue ;; esac
            seen+="$f "
            out+="${out:+,}$(json_str "$f")"
        done
    done
    [ -n "$out" ] && printf '[%s]' "$out"
}

shopt -s nullglob
if [ -d "$CORPUS" ]; then
    CORPUS_NAME=$(basename "$CORPUS")
    CORPUS_TITLE=$CORPUS_NAME
    train=$(files_json_ "$CORPUS" '*train*.shard' '*train*.bin')
    val=$(files_json_ "$CORPUS" '*val*.shard' '*val*.bin')
    test=$(files_json_ "$CORPUS" '*test*.shard' '*test*.bin')
    models=("$CORPUS"/*.model)
    [ -n "$train" ] || DIE_RC=2 die "$CORPUS: no training shards (*train*.shard or *train*.bin)"
    [ -n "$test" ] || DIE_RC=2 die "$CORPUS: no test shards (*test*.shard or *test*.bin)"
    [ "${#models[@]}" -le 1 ] || DIE_RC=2 die "$CORPUS: several *.model files; which tokenizer made the shards? (use a corpus .json)"
    DATA_SETS=("data.train=$train" "data.val=${val:-[]}" "data.test=$test"
                   "data.tokenizer=${models[0]:-}" data.format=auto data.vocab_size=0)
elif [ -f "$CORPUS" ]; then
    case "$CORPUS" in *.json) ;; *) DIE_RC=2 die "$CORPUS: a corpus is a folder of shards or a .json file" ;; esac
    CORPUS_NAME=$(basename "$CORPUS" .json)
    sets=$(python3 - "$CORPUS" <<'PY'
import json, os, sys
path = sys.argv[1]
try:
    doc = json.load(open(path))
except Exception as ex:
    sys.exit(f"{path}: not valid JSON ({ex})")
if not isinstance(doc, dict):
    sys.exit(f"{path}: expected an object")
extra = set(doc) - {"name", "data"}
if extra:
    sys.exit(f"{path}: unknown key(s) {sorted(extra)}: a corpus file has \"name\" and \"data\"")
data = doc.get("data")
if not isinstance(data, dict):
    sys.exit(f"{path}: \"data\" (an object with train, val, test, ...) is required")
allowed = {"train", "val", "test", "tokenizer", "format", "vocab_size"}
extra = set(data) - allowed
if extra:
    sys.exit(f"{path}: unknown key(s) in data: {sorted(extra)} (allowed: {sorted(allowed)})")
for k in ("train", "test"):
    if not data.get(k):
        sys.exit(f"{path}: data.{k} is required")
base = os.path.dirname(os.path.abspath(path))
def fix(p):
    if not isinstance(p, str):
        sys.exit(f"{path}: paths must be strings")
    return os.path.normpath(p if os.path.isabs(p) else os.path.join(base, p))
def paths(v):
    return [fix(p) for p in (v if isinstance(v, list) else [v])]
out = [("data.train", json.dumps(paths(data["train"]))),
       ("data.val", json.dumps(paths(data.get("val", [])))),
       ("data.test", json.dumps(paths(data["test"]))),
       ("data.tokenizer", fix(data["tokenizer"]) if data.get("tokenizer") else ""),
       ("data.format", str(data.get("format", "auto"))),
       ("data.vocab_size", json.dumps(data.get("vocab_size", 0)))]
print(str(doc.get("name", "")).replace("\n", " "))
for k, v in out:
    print(f"{k}={v}")
PY
    ) || DIE_RC=2 die "bad corpus file (above)"
    { IFS= read -r CORPUS_TITLE; mapfile -t DATA_SETS; } <<< "$sets"
    [ -n "$CORPUS_TITLE" ] || CORPUS_TITLE=$CORPUS_NAME
else
    DIE_RC=2 die "$CORPUS: a corpus is a folder of shards or a .json file"
fi
shopt -u nullglob
CORPUS_NAME=$(printf '%s' "$CORPUS_NAME" | tr -c 'A-Za-z0-9._-' '_')

# the runs of this corpus live apart from Table 1's (same ids, other data)
RUNS="$OUTD/runs-$CORPUS_NAME"
LOGS="$OUTD/logs-$CORPUS_NAME"

#       id         label in the paper's Table 3   config name  mixer
ppl_row b1_rope    "RoPE (B1)"                    b1_rope      attention
ppl_row b2_alibi   "ALiBi (B2)"                   b2_alibi     attention
ppl_row m1_rfa     "RFA (M1)"                     m1_rfa       rfa
ppl_row m2_sc_rfa  "SC-RFA (M2)"                  m2_sc_rfa    rfa

ppl_main "table3-$CORPUS_NAME" \
    "**Table 3.** Long-context extrapolation on $CORPUS_TITLE (test perplexity by context length L; RFA paper layout)."
