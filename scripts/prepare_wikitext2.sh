#!/usr/bin/env bash
# Encodes the bundled WikiText-2 (data/wikitext-2/*.tokens.zst) with the bundled SentencePiece model into
# seqtok shards under build/data/wikitext2/, then prints the shard summary.
#
# Idempotent: the shards are rebuilt only when the inputs, the tokenizer or this script change (a stamp
# file records their sha256). Each shard is written atomically by seqtok, so an interrupted run leaves
# either the old shard or none, never half of one.
#
#   scripts/prepare_wikitext2.sh            prepare (or confirm) and print the summary
#   OUT=dir scripts/prepare_wikitext2.sh    another output folder
#   SEQTOK=path/to/seqtok                   another build of seqtok (default bin/seqtok)
set -euo pipefail
cd "$(dirname "$0")/.."
SEQTOK=${SEQTOK:-bin/seqtok}
OUT=${OUT:-build/data/wikitext2}
MODEL=data/tokenizer/wikitext2_bpe8192.model
SRC=data/wikitext-2

[ -x "$SEQTOK" ] || { echo "prepare_wikitext2: $SEQTOK not built; run make first" >&2; exit 1; }
for f in "$MODEL" "$SRC"/wiki.{train,valid,test}.tokens.zst; do
    [ -f "$f" ] || { echo "prepare_wikitext2: missing $f (a fresh clone has it; was it deleted?)" >&2; exit 1; }
done

mkdir -p "$OUT"
stamp="$OUT/.stamp"
want=$(sha256sum "$MODEL" "$SRC"/wiki.{train,valid,test}.tokens.zst "$0" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$OUT/train.shard" ] && [ -f "$OUT/valid.shard" ] \
   && [ -f "$OUT/test.shard" ]; then
    echo "prepare_wikitext2: $OUT is up to date"
else
    rm -f "$stamp"
    for split in train valid test; do
        "$SEQTOK" encode --model "$MODEL" --input "$SRC/wiki.$split.tokens.zst" --output "$OUT/$split.shard"
    done
    echo "$want" > "$stamp"
fi
"$SEQTOK" info "$OUT/train.shard" "$OUT/valid.shard" "$OUT/test.shard"
