#!/usr/bin/env bash
# Encodes the bundled WikiText-2 (data/wikitext-2/*.tokens.zst) with the bundled SentencePiece model into
# seqtok shards under build/data/wikitext2/, then prints the shard summary.
#
# Idempotent: the shards are rebuilt only when the inputs, the tokenizer or this script change (a stamp
# file records their sha256). Each shard is written atomically by seqtok, so an interrupted run leaves
# either the old shard or none, never half of one.
#
#   scripts/prepare_wikitext2.sh            prepare (or confirm) and print the summary
#   SEQ_DATA_DIR=dir scripts/prepare_wikitext2.sh    another output folder
#   SEQTOK=path/to/seqtok                   another build of seqtok (default bin/seqtok)
set -euo pipefail
cd "$(dirname "$0")/.."
SEQTOK=${SEQTOK:-bin/seqtok}
SEQ_DATA_DIR=${SEQ_DATA_DIR:-build/data/wikitext2}
MODEL=data/tokenizer/wikitext2_bpe8192.model
SRC=data/wikitext-2

[ -x "$SEQTOK" ] || { echo "prepare_wikitext2: $SEQTOK not built; run make first" >&2; exit 1; }
for f in "$MODEL" "$SRC"/wiki.{train,valid,test}.tokens.zst; do
    [ -f "$f" ] || { echo "prepare_wikitext2: missing $f (a fresh clone has it; was it deleted?)" >&2; exit 1; }
done

mkdir -p "$SEQ_DATA_DIR"
stamp="$SEQ_DATA_DIR/.stamp"
want=$(sha256sum "$MODEL" "$SRC"/wiki.{train,valid,test}.tokens.zst "$0" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$SEQ_DATA_DIR/train.shard" ] && [ -f "$SEQ_DATA_DIR/valid.shard" ] \
   && [ -f "$SEQ_DATA_DIR/test.shard" ]; then
    echo "prepare_wikitext2: $SEQ_DATA_DIR is up to date"
else
    rm -f "$stamp"
    for split in train valid test; do
        "$SEQTOK" encode --model "$MODEL" --input "$SRC/wiki.$split.tokens.zst" --output "$SEQ_DATA_DIR/$split.shard"
    done
    echo "$want" > "$stamp"
fi
"$SEQTOK" info "$SEQ_DATA_DIR/train.shard" "$SEQ_DATA_DIR/valid.shard" "$SEQ_DATA_DIR/test.shard"
