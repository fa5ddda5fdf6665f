#!/usr/bin/env bash
# Command-line tests of seqtok, seqtrain and seqeval: round trips, shard inspection, tokenizer training
# (including reproducing the committed tokenizer), config handling, and bad input of every kind.
#
#   BIN=bin bash tests/test_cli.sh               (release build, the default)
#   BIN=build/asan/bin bash tests/test_cli.sh    (ASan + UBSan build)
#
# Run from the repository root. Prints `ok - ...` / `not ok - ... (details)` per check, a summary on
# stderr, and exits non-zero when any check failed. Every fixture is generated in a temp dir.
set -u

BIN=${BIN:-bin}
ROOT=$(pwd)
for t in seqtok seqtrain seqeval; do
    if [ ! -x "$BIN/$t" ]; then
        echo "test_cli.sh: $BIN/$t not found (run from the repo root after \`make tools\`, or set BIN)" >&2
        exit 2
    fi
done
BIN=$(cd "$BIN" && pwd)
SEQTOK="$BIN/seqtok"
SEQTRAIN="$BIN/seqtrain"
SEQEVAL="$BIN/seqeval"
MODEL="$ROOT/data/tokenizer/wikitext2_bpe8192.model"
WIKI="$ROOT/data/wikitext-2"

# UBSan stays strict. Leak checking stays on too: the error paths exit() from deep inside with memory
# still referenced, which LeakSanitizer does not report as leaked (set detect_leaks=0 here if that
# ever changes, and say why).
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0}
export OMP_NUM_THREADS=2

source tests/lib.sh || exit 2
test_scratch cli
OUT="$W/stdout"   # run CMD... (tests/lib.sh) writes its output here
ERR="$W/stderr"

sanitizer_said() { grep -qE 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error' "$ERR"; }

# expect_ok WHAT CMD...: exit 0 and no sanitizer report
expect_ok() {
    local what=$1; shift
    run "$@"
    if sanitizer_said; then not_ok "$what" "sanitizer report: $(show "$ERR")"
    elif [ "$RC" -ne 0 ]; then not_ok "$what" "exit $RC, stderr: $(show "$ERR")"
    else ok "$what"; fi
}

# expect_fail WHAT SUBSTRING... -- CMD...: exit 1 or 2 (not a signal), stderr exactly one line holding
# every SUBSTRING, no sanitizer report
expect_fail() {
    local what=$1; shift
    local subs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do subs+=("$1"); shift; done
    shift
    run "$@"
    local lines missing=""
    lines=$(wc -l <"$ERR")
    for s in "${subs[@]}"; do grep -qF -- "$s" "$ERR" || missing="$missing '$s'"; done
    if sanitizer_said; then not_ok "$what" "sanitizer report: $(show "$ERR")"
    elif [ "$RC" -ne 1 ] && [ "$RC" -ne 2 ]; then not_ok "$what" "exit status $RC, expected 1 or 2; stderr: $(show "$ERR")"
    elif [ "$lines" -ne 1 ] || [ -n "$(tail -c 1 "$ERR")" ]; then
        not_ok "$what" "stderr is not exactly one line: $(show "$ERR")"
    elif [ -n "$missing" ]; then not_ok "$what" "stderr lacks$missing: $(show "$ERR")"
    else ok "$what"; fi
}

out_has() { grep -qF -- "$1" "$OUT"; }           # stdout of the last run holds a fixed string
out_has_re() { grep -qE -- "$1" "$OUT"; }        # ... an extended regex
same_file() { cmp -s "$1" "$2"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
no_leftovers() { [ -z "$(ls -A "$1")" ]; }       # a directory is empty

# tokens of a shard, from `seqtok info`
tokens_of() { "$SEQTOK" info "$@" 2>/dev/null | awk '$1 == "tokens" {print $2}'; }

# python helpers: write llm.c / raw shards, patch header fields, list the ids of a seqtok shard
cat >"$W/tools.py" <<'EOF'
import struct, subprocess, sys

def llmc(path, ids, magic=20240520, version=1, count=None, extra=b""):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = magic, version, len(ids) if count is None else count
    fmt = "<%dH" if magic == 20240520 else "<%dI"
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr) + struct.pack(fmt % len(ids), *ids) + extra)

def raw(path, width, ids):
    with open(path, "wb") as f:
        f.write(struct.pack("<%d%s" % (len(ids), "H" if width == 2 else "I"), *ids))

def patch_u32(path, off, value):
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(struct.pack("<I", value))

def ids(path):
    b = open(path, "rb").read()
    tb, n_frames, index = struct.unpack_from("<I", b, 20)[0], *struct.unpack_from("<QQ", b, 40)
    offs = struct.unpack_from("<%dQ" % (n_frames + 1), b, index)
    out = []
    for i in range(n_frames):
        raw_ = subprocess.run(["zstd", "-dcq"], input=b[offs[i]:offs[i + 1]], stdout=subprocess.PIPE,
                              check=True).stdout
        out += struct.unpack("<%d%s" % (len(raw_) // tb, "H" if tb == 2 else "I"), raw_)
    return out

cmd = sys.argv[1]
if cmd == "llmc":  # llmc PATH IDS [magic version count extra_bytes]
    a = sys.argv
    llmc(a[2], [int(x) for x in a[3].split(",")], int(a[4]) if len(a) > 4 else 20240520,
         int(a[5]) if len(a) > 5 else 1, int(a[6]) if len(a) > 6 and a[6] != "-" else None,
         b"\0" * (int(a[7]) if len(a) > 7 else 0))
elif cmd == "raw":  # raw PATH WIDTH IDS
    raw(sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")])
elif cmd == "patch_u32":  # patch_u32 PATH OFFSET VALUE
    patch_u32(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif cmd == "ids":  # ids SHARD -> 1,2,3
    print(",".join(map(str, ids(sys.argv[2]))))
elif cmd == "trunc":  # trunc PATH NEWSIZE
    with open(sys.argv[2], "r+b") as f:
        f.truncate(int(sys.argv[3]))
elif cmd == "flip":  # flip PATH OFFSET: xor one byte
    with open(sys.argv[2], "r+b") as f:
        f.seek(int(sys.argv[3])); c = f.read(1); f.seek(int(sys.argv[3])); f.write(bytes([c[0] ^ 0x5a]))
EOF
py() { python3 "$W/tools.py" "$@"; }

encode() { "$SEQTOK" encode --quiet --model "$MODEL" "$@"; }
decode() { "$SEQTOK" decode --model "$MODEL" "$@"; }

mkdir -p "$W/s" "$W/o" "$W/cfg"
printf 'line one\nline two\n\xff\xfe bad bytes\nline four\n' >"$W/latin.txt"  # invalid UTF-8 in line 3

# ============================================================================================
# 1. round trips: text -> shard -> text is exact

python3 - "$W/t.txt" <<'EOF'
import sys
lines = [
    "Hello world, this is an ordinary line.",
    "",
    "   leading spaces and trailing spaces   ",
    "multiple    spaces\tand\ttabs\t\there",
    "",
    "",
    "   ",
    "\t",
    "CJK 漢字と仮名のテスト 한국어 and emoji 😀🎉🦄 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "x" * 50000 + " long line " + "y z " * 12500,
    "carriage return at the end\r",
    "mixed: café naïve Ωμέγα — “quotes” …",
    "last ordinary line.",
]
open(sys.argv[1], "wb").write(("\n".join(lines) + "\n").encode())
EOF
check "fixture: t.txt has a line of 100 KB" [ "$(awk 'length > m {m = length} END {print m}' "$W/t.txt")" -ge 100000 ]

expect_ok "encode t.txt (spaces, tabs, CJK/emoji byte fallback, 100 KB line, CR) with the bundled tokenizer" \
    encode --input "$W/t.txt" --output "$W/s/t.shard"
check "encode reports 13 documents for the 13 lines of t.txt" out_has "13 documents"
expect_ok "decode t.shard" decode --input "$W/s/t.shard" --output "$W/o/t.txt"
DETAIL="decoded text differs: $(cmp "$W/t.txt" "$W/o/t.txt" 2>&1)"
check "decode(encode(t.txt)) equals t.txt byte for byte" same_file "$W/t.txt" "$W/o/t.txt"

zstd -q -19 -c "$W/t.txt" >"$W/t.txt.zst"
expect_ok "encode from a .zst compressed input" encode --input "$W/t.txt.zst" --output "$W/s/tz.shard"
decode --input "$W/s/tz.shard" >"$W/o/tz.txt" 2>/dev/null
check "round trip from t.txt.zst equals the uncompressed text" same_file "$W/t.txt" "$W/o/tz.txt"
check "shard from .zst input is identical to the shard from the plain input" same_file "$W/s/t.shard" "$W/s/tz.shard"

# a first line that is empty: its batch's text buffer is still unallocated (UBSan's memcpy(NULL, ..., 0))
printf '\nafter an empty first line\n' >"$W/first_empty.txt"
expect_ok "encode a file whose first line is empty (no sanitizer report)" \
    encode --input "$W/first_empty.txt" --output "$W/s/first_empty.shard"
decode --input "$W/s/first_empty.shard" >"$W/o/first_empty.txt" 2>/dev/null
check "... and it decodes back byte for byte" same_file "$W/first_empty.txt" "$W/o/first_empty.txt"

printf 'second file, first line\n\nsecond file, last line\n' >"$W/t2.txt"
cat "$W/t.txt" "$W/t2.txt" >"$W/t12.txt"
zstd -q -c "$W/t2.txt" >"$W/t2.txt.zst"
expect_ok "encode a plain and a .zst input together" \
    encode --input "$W/t.txt" --input "$W/t2.txt.zst" --output "$W/s/t12.shard"
decode --input "$W/s/t12.shard" >"$W/o/t12.txt" 2>/dev/null
check "round trip of two inputs equals their concatenation" same_file "$W/t12.txt" "$W/o/t12.txt"

python3 - "$W" <<'EOF'
import json, sys
d = sys.argv[1]
texts = ["plain record", "tabs\tand  spaces ", "quotes \" and backslash \\ inside",
         "unicode é 漢字 😀", "", "escaped \u00e9 and \U0001F600 from json"]
with open(d + "/r.jsonl", "w") as f:
    for t in texts:
        f.write(json.dumps({"id": 1, "text": t, "meta": {"x": [1, 2]}}) + "\n")
with open(d + "/r_body.jsonl", "w") as f:
    for t in texts:
        f.write(json.dumps({"text": "not this one", "body": t}, ensure_ascii=False) + "\n")
with open(d + "/r.expected", "w") as f:
    f.write("".join(t + "\n" for t in texts))
EOF
expect_ok "encode a .jsonl input (field text by default)" encode --input "$W/r.jsonl" --output "$W/s/r.shard"
decode --input "$W/s/r.shard" >"$W/o/r.txt" 2>/dev/null
check "jsonl round trip gives the texts one per line" same_file "$W/r.expected" "$W/o/r.txt"
expect_ok "encode jsonl with --jsonl-key body" \
    encode --input "$W/r_body.jsonl" --jsonl-key body --output "$W/s/rb.shard"
decode --input "$W/s/rb.shard" >"$W/o/rb.txt" 2>/dev/null
check "--jsonl-key body round trip gives the body fields, not text" same_file "$W/r.expected" "$W/o/rb.txt"
zstd -q -c "$W/r_body.jsonl" >"$W/r_body.jsonl.zst"
expect_ok "encode a .jsonl.zst input with --jsonl-key body" \
    encode --input "$W/r_body.jsonl.zst" --jsonl-key body --output "$W/s/rbz.shard"
check "shard from .jsonl.zst equals shard from .jsonl" same_file "$W/s/rb.shard" "$W/s/rbz.shard"

zstd -dc "$WIKI/wiki.valid.tokens.zst" | head -n 2000 >"$W/wiki2000.txt"
expect_ok "encode the first 2000 lines of wiki.valid.tokens" \
    encode --input "$W/wiki2000.txt" --output "$W/s/wiki.shard"
decode --input "$W/s/wiki.shard" >"$W/o/wiki.txt" 2>/dev/null
check "first 2000 lines of wiki.valid round-trip exactly" same_file "$W/wiki2000.txt" "$W/o/wiki.txt"

expect_ok "encode with --frame-tokens 64 (many frames)" \
    encode --frame-tokens 64 --input "$W/t.txt" --output "$W/s/t64.shard"
decode --input "$W/s/t64.shard" >"$W/o/t64.txt" 2>/dev/null
check "round trip through 64-token frames is exact" same_file "$W/t.txt" "$W/o/t64.txt"
N_T=$(tokens_of "$W/s/t.shard")
run "$SEQTOK" info "$W/s/t64.shard"
check "info of the 64-token-frame shard shows ceil(N/64) frames" out_has "$(((N_T + 63) / 64)) x 64 tokens"

expect_ok "encode --no-eos" encode --no-eos --input "$W/t.txt" --output "$W/s/tnoeos.shard"
DETAIL="tokens without EOS $(tokens_of "$W/s/tnoeos.shard"), with EOS $N_T"
check "--no-eos shard has exactly 13 tokens (one EOS per line) fewer" \
    [ "$(($(tokens_of "$W/s/tnoeos.shard") + 13))" = "$N_T" ]

: >"$W/empty.txt"
expect_ok "encode an empty text file" encode --input "$W/empty.txt" --output "$W/s/empty.shard"
check "a shard of 0 tokens is a 136-byte file" [ "$(stat -c %s "$W/s/empty.shard")" = 136 ]
run "$SEQTOK" info "$W/s/empty.shard"
check "info of the empty shard says 0 tokens and (empty) ids" eval 'out_has_re "tokens +0$" && out_has "(empty)"'
expect_ok "decode the empty shard" decode --input "$W/s/empty.shard"
check "decoding the empty shard prints nothing" [ ! -s "$OUT" ]

# ============================================================================================
# 2. seqtok info

expect_ok "info on t.shard" "$SEQTOK" info "$W/s/t.shard"
check "info shows format seqtok" out_has_re "format +seqtok$"
check "info shows the token count $N_T" out_has_re "tokens +$N_T$"
check "info shows vocab size 8192" out_has_re "vocab size +8192$"
check "info shows token width 2 bytes" out_has_re "token width +2 bytes$"
check "info shows the sha256 of wikitext2_bpe8192.model" out_has_re "tokenizer +$(sha "$MODEL")$"
check "info shows min/max ids with min 2 (EOS is the smallest id)" out_has_re "ids +2 \.\. [0-9]+$"
IDS_T=$(py ids "$W/s/t.shard")
MAX_T=$(echo "$IDS_T" | tr , '\n' | sort -n | tail -1)
check "info's max id equals the largest id in the frames ($MAX_T)" out_has_re "ids +2 \.\. $MAX_T$"
expect_ok "info --verify on t.shard and wiki.shard" "$SEQTOK" info --verify "$W/s/t.shard" "$W/s/wiki.shard"
check "info --verify reports every token verified for both shards" \
    [ "$(grep -c "verified        all .* tokens decode and are < 8192" "$OUT")" = 2 ]

py llmc "$W/s/gpt2.bin" 5,100,7,50000,42,9
expect_ok "info on an llm.c .bin shard" "$SEQTOK" info "$W/s/gpt2.bin"
check "info of the llm.c shard shows format llmc, 6 tokens, vocab 50257" \
    eval 'out_has_re "format +llmc$" && out_has_re "tokens +6$" && out_has_re "vocab size +50257$"'
check "info of the llm.c shard scans min/max ids 5 .. 50000" out_has_re "ids +5 \.\. 50000$"
check "info of the llm.c shard shows no tokenizer hash" out_has_re "tokenizer +none$"
py llmc "$W/s/llama.bin" 3,128000,77 20240801 7
expect_ok "info on a uint32 (Llama-3 magic) llm.c shard" "$SEQTOK" info "$W/s/llama.bin"
check "uint32 llm.c shard: width 4, vocab 128256, ids 3 .. 128000" \
    eval 'out_has_re "token width +4 bytes$" && out_has_re "vocab size +128256$" && out_has_re "ids +3 \.\. 128000$"'
py raw "$W/s/r16.bin" 2 10,20,300,4
expect_ok "info --format raw_u16 --vocab 1000" "$SEQTOK" info --format raw_u16 --vocab 1000 "$W/s/r16.bin"
check "raw_u16 info: format raw_u16, 4 tokens, vocab 1000, ids 4 .. 300" \
    eval 'out_has_re "format +raw_u16$" && out_has_re "tokens +4$" && out_has_re "vocab size +1000$" && out_has_re "ids +4 \.\. 300$"'

# ============================================================================================
# 3. decode: --ids, windows, --output

IDS_R=$(py ids "$W/s/r.shard")
expect_ok "decode --ids with the ids of the jsonl shard (unicode, tabs, quotes)" decode --ids "$IDS_R"
check "decode --ids of the shard's ids equals the shard's text" same_file "$W/r.expected" "$OUT"
expect_ok "decode --ids 2 (EOS)" decode --ids 2
check "decode --ids 2 prints one newline" [ "$(od -An -c "$OUT" | tr -d ' ')" = '\n' ]
printf 'alpha beta gamma\n' >"$W/one.txt"
printf 'alpha beta gamma\ndelta epsilon\nzeta eta theta\n' >"$W/three.txt"
encode --input "$W/one.txt" --output "$W/s/one.shard" >/dev/null 2>&1
encode --input "$W/three.txt" --output "$W/s/three.shard" >/dev/null 2>&1
N1=$(tokens_of "$W/s/one.shard")
N3=$(tokens_of "$W/s/three.shard")
expect_ok "decode --start 0 --count <tokens of line 1>" decode --input "$W/s/three.shard" --start 0 --count "$N1"
check "window [0, N1) decodes to exactly the first line" [ "$(cat "$OUT")" = "alpha beta gamma" ]
expect_ok "decode --start <tokens of line 1> (to the end)" decode --input "$W/s/three.shard" --start "$N1"
check "window [N1, end) decodes to lines 2 and 3" \
    [ "$(cat "$OUT")" = "$(printf 'delta epsilon\nzeta eta theta')" ]
expect_ok "decode --count 0" decode --input "$W/s/three.shard" --count 0
check "decode --count 0 prints nothing" [ ! -s "$OUT" ]
expect_ok "decode --start N (at the end) prints nothing" decode --input "$W/s/three.shard" --start "$N3"
expect_fail "decode --start past the end names the shard" "--start $((N3 + 1))" "past the end" "three.shard" -- \
    decode --input "$W/s/three.shard" --start $((N3 + 1))
expect_fail "decode --count past the end names the shard" "past the end" "three.shard" -- \
    decode --input "$W/s/three.shard" --start 1 --count "$N3"
expect_fail "decode --start 2^64-1 is out of range (not 'not an integer'), with the range" \
    "--start: 18446744073709551615 is out of range (allowed: 0 to 1000000000000000000)" -- \
    decode --input "$W/s/three.shard" --start 18446744073709551615
expect_fail "decode --count -2^64 is out of range" "--count: -18446744073709551616 is out of range" -- \
    decode --input "$W/s/three.shard" --count -18446744073709551616
expect_ok "decode --output FILE" decode --input "$W/s/three.shard" --output "$W/o/three.txt"
check "decode --output writes the file and nothing to stdout" eval '[ ! -s "$OUT" ] && same_file "$W/three.txt" "$W/o/three.txt"'
expect_fail "decode --output under a missing directory names the path" "$W/nodir/x.txt" "No such file" -- \
    decode --input "$W/s/three.shard" --output "$W/nodir/x.txt"
expect_fail "decode --ids with id 9000 >= vocab 8192" "9000" "8192" -- decode --ids 5,9000
expect_fail "decode --ids with a non-number" "--ids" "1,x,3" -- decode --ids 1,x,3
expect_fail "decode with both --input and --ids" "exactly one of --input or --ids" -- \
    decode --input "$W/s/three.shard" --ids 1
expect_fail "decode without --model" "--model is required" -- "$SEQTOK" decode --ids 1
expect_fail "decode with an unknown --format" "--format 'bin'" -- decode --format bin --input "$W/s/three.shard"

# ============================================================================================
# 4. seqtok train

python3 - "$W" <<'EOF'
import random, sys
d = sys.argv[1]
for name, seed, words in [
        ("a", 1, "the quick brown fox jumps over lazy dog alpha beta gamma delta river stone cloud tree house"),
        ("b", 2, "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut")]:
    r = random.Random(seed)
    w = words.split()
    with open("%s/corpus_%s.txt" % (d, name), "w") as f:
        for i in range(400):
            f.write(" ".join(r.choice(w) for _ in range(r.randint(3, 12))) + ".\n")
EOF
expect_ok "train a BPE tokenizer of vocab 300 on a 400-line corpus" \
    "$SEQTOK" train --input "$W/corpus_a.txt" --model-prefix "$W/tiny_a" --vocab-size 300 --model-type bpe
check "train writes PREFIX.model and PREFIX.vocab" eval '[ -s "$W/tiny_a.model" ] && [ -s "$W/tiny_a.vocab" ]'
check "train prints the sha256 of the model it wrote" out_has "sha256 $(sha "$W/tiny_a.model")"
check "the .vocab file lists 300 pieces" [ "$(wc -l <"$W/tiny_a.vocab")" = 300 ]
printf 'the quick brown fox.\nunseen words: zebra 😀 漢字\n' >"$W/tiny_in.txt"
expect_ok "encode with the tiny tokenizer" \
    "$SEQTOK" encode --quiet --model "$W/tiny_a.model" --input "$W/tiny_in.txt" --output "$W/s/tiny.shard"
run "$SEQTOK" info "$W/s/tiny.shard"
check "tiny shard records vocab 300 and the tiny model's sha256" \
    eval 'out_has_re "vocab size +300$" && out_has_re "tokenizer +$(sha "$W/tiny_a.model")$"'
"$SEQTOK" decode --model "$W/tiny_a.model" --input "$W/s/tiny.shard" >"$W/o/tiny.txt" 2>/dev/null
check "tiny tokenizer round trip is exact (byte fallback for unseen characters)" same_file "$W/tiny_in.txt" "$W/o/tiny.txt"
expect_ok "train a second tiny tokenizer (other corpus, vocab 300)" \
    "$SEQTOK" train --input "$W/corpus_b.txt" --model-prefix "$W/tiny_b" --vocab-size 300
check "the two tiny tokenizers differ" [ "$(sha "$W/tiny_a.model")" != "$(sha "$W/tiny_b.model")" ]
expect_fail "decode with a tokenizer other than the shard's asks for --force" "tiny.shard" "--force" -- \
    "$SEQTOK" decode --model "$W/tiny_b.model" --input "$W/s/tiny.shard"
expect_ok "decode --force with another tokenizer of the same vocab" \
    "$SEQTOK" decode --force --model "$W/tiny_b.model" --input "$W/s/tiny.shard"
expect_fail "train: missing input file names it" "$W/missing.txt" "No such file" -- \
    "$SEQTOK" train --input "$W/corpus_a.txt" --input "$W/missing.txt" --model-prefix "$W/failed" --vocab-size 300
expect_fail "train: invalid UTF-8 input names the file and line 3" "$W/latin.txt" "line 3" "UTF-8" -- \
    "$SEQTOK" train --input "$W/latin.txt" --model-prefix "$W/failed" --vocab-size 300
DETAIL="left behind: $(cd "$W" && ls -d failed* 2>/dev/null | tr '\n' ' ')"
check "a failed train leaves no PREFIX.model, .vocab or .probe file" [ -z "$(cd "$W" && ls -d failed* 2>/dev/null)" ]
expect_fail "train --model-type bogus" "--model-type 'bogus'" -- \
    "$SEQTOK" train --input "$W/corpus_a.txt" --model-prefix "$W/x" --model-type bogus
expect_fail "train with a prefix under a missing directory names the model path" "$W/nodir/m.model" -- \
    "$SEQTOK" train --input "$W/corpus_a.txt" --model-prefix "$W/nodir/m" --vocab-size 300
expect_fail "train without --model-prefix" "--model-prefix is required" -- "$SEQTOK" train --input "$W/corpus_a.txt"
expect_fail "train --vocab-size 5 is out of range" "--vocab-size" "out of range" -- \
    "$SEQTOK" train --input "$W/corpus_a.txt" --model-prefix "$W/x" --vocab-size 5
# seqtok's own words for SentencePiece's failures: no source lines of it, no flag spelled its way
printf '\n\n' > "$W/blank.txt"
expect_fail "train on empty lines only: seqtok's message" "the input holds no text (2 lines, none with a character)" -- \
    "$SEQTOK" train --input "$W/blank.txt" --model-prefix "$W/x" --vocab-size 300
check "... without SentencePiece's internals or its --character_coverage" \
    eval '! grep -qE "trainer_interface|character_coverage|Internal" "$ERR"'
expect_fail "train --vocab-size 20: too small for the characters, naming seqtok's options" \
    "raise --vocab-size above" "--character-coverage" -- \
    "$SEQTOK" train --input "$W/corpus_a.txt" --model-prefix "$W/x" --vocab-size 20
check "... and not SentencePiece's --character_coverage" eval '! grep -q "character_coverage" "$ERR"'
run "$SEQTOK" train --input "$W/corpus_a.txt" --model-prefix "$W/few" --vocab-size 100000
DETAIL="exit $RC, stderr: $(show "$ERR")"
check "train --vocab-size 100000 on a small text: exit 0, and a note that it has fewer pieces" \
    eval '[ "$RC" = 0 ] && grep -q "few.model has [0-9]* pieces, fewer than the --vocab-size 100000 asked for" "$ERR"'

mkdir -p "$W/repro/data/tokenizer"
(cd "$W/repro" && run "$SEQTOK" train --input "$WIKI/wiki.train.tokens.zst" \
    --model-prefix data/tokenizer/wikitext2_bpe8192 --vocab-size 8192 --model-type bpe \
    --character-coverage 0.9995 --threads 2 && echo "$RC" >"$W/repro/rc")
DETAIL="exit $(cat "$W/repro/rc" 2>/dev/null), stderr: $(show "$ERR")"
check "retraining on wiki.train reproduces data/tokenizer/wikitext2_bpe8192.model (same sha256)" \
    [ "$(sha "$W/repro/data/tokenizer/wikitext2_bpe8192.model" 2>/dev/null)" = "$(sha "$MODEL")" ]

# ============================================================================================
# 5a. bad shards: seqtok info, seqtok decode, seqeval --data FILE each give one line naming the file

B="$W/bad"
mkdir -p "$B"
: >"$B/empty.shard"
head -c 50 "$W/s/wiki.shard" >"$B/trunc_header.shard"
cp "$W/s/wiki.shard" "$B/trunc_frames.shard"
py trunc "$B/trunc_frames.shard" $(($(stat -c %s "$W/s/wiki.shard") / 2))
cp "$W/s/wiki.shard" "$B/trunc_index.shard"
py trunc "$B/trunc_index.shard" $(($(stat -c %s "$W/s/wiki.shard") - 4))
head -c 4096 /dev/urandom >"$B/random.shard"
printf 'RANDOMXX' | dd of="$B/random.shard" conv=notrunc status=none  # never a valid magic by chance
cp "$W/s/wiki.shard" "$B/version7.shard"
py patch_u32 "$B/version7.shard" 8 7
cp "$W/s/wiki.shard" "$B/vocab100.shard"
py patch_u32 "$B/vocab100.shard" 16 100
py raw "$B/raw_big.u16" 2 1,2,3,900,5
py llmc "$B/llmc_big.bin" 10,20,5000,30
py llmc "$B/llmc_size.bin" 10,20,30 20240520 1 - 1
py llmc "$B/llmc_ver.bin" 10,20,30 20240520 3
head -c 27 /dev/zero >"$B/odd.u16"
mkdir -p "$B/dir.shard"
cp "$W/s/wiki.shard" "$B/flipped.shard"
py flip "$B/flipped.shard" 200

# bad_shard WHAT SUBSTRING FILE [extra options]: the same bad file through the three readers
bad_shard() {
    local what=$1 sub=$2 file=$3; shift 3
    expect_fail "info: $what" "$file" "$sub" -- "$SEQTOK" info "$@" "$file"
    expect_fail "decode: $what" "$file" "$sub" -- decode "$@" --input "$file"
    expect_fail "seqeval --data: $what" "$file" "$sub" -- "$SEQEVAL" --plan --context 16 --data "$file" "$@"
}
bad_shard "empty file" "empty file" "$B/empty.shard"
bad_shard "truncated header (50 of 128 bytes)" "truncated" "$B/trunc_header.shard"
bad_shard "file cut in the middle of the frames" "truncated" "$B/trunc_frames.shard"
bad_shard "file cut in the middle of the index" "truncated" "$B/trunc_index.shard"
bad_shard "random bytes (wrong magic)" "magic" "$B/random.shard"
bad_shard "version field patched to 7" "unsupported version 7" "$B/version7.shard"
bad_shard "directory given as a shard" "not a regular file" "$B/dir.shard"
bad_shard "missing file" "No such file" "$B/missing.shard"
bad_shard "raw_u16 without --vocab" "vocab size must be given" "$B/raw_big.u16" --format raw_u16
bad_shard "raw_u16 of 27 bytes (not a multiple of 2)" "not a multiple of 2" "$B/odd.u16" --format raw_u16 --vocab 100
bad_shard "llm.c .bin one byte longer than its header says" "size mismatch" "$B/llmc_size.bin"
bad_shard "llm.c .bin with version 3" "unsupported llm.c version 3" "$B/llmc_ver.bin"
bad_shard "raw_u16 holding id 900 with --vocab 500" "token id 900" "$B/raw_big.u16" --format raw_u16 --vocab 500
bad_shard "llm.c .bin holding id 5000 with --vocab 1000" "token id 5000" "$B/llmc_big.bin" --vocab 1000
bad_shard "seqtok shard whose header vocab is patched to 100 (below its max id)" "vocab size 100" "$B/vocab100.shard"
expect_fail "info --verify: a flipped byte inside a frame is a corrupt frame" "$B/flipped.shard" "corrupt frame 0" -- \
    "$SEQTOK" info --verify "$B/flipped.shard"
expect_fail "decode: a flipped byte inside a frame is a corrupt frame" "$B/flipped.shard" "corrupt frame 0" -- \
    decode --input "$B/flipped.shard"
expect_fail "info: seqtok shard with --format llmc" "$W/s/t.shard" "not an llm.c shard" -- \
    "$SEQTOK" info --format llmc "$W/s/t.shard"
expect_fail "info: seqtok shard with a --vocab other than its header's" "$W/s/t.shard" "vocab size 1000" -- \
    "$SEQTOK" info --vocab 1000 "$W/s/t.shard"
expect_fail "info without a shard" "at least one shard" -- "$SEQTOK" info

DETAIL="left behind: $(compgen -G "$W/s/*.tmp*" | tr '\n' ' ')"
check "no .tmp file left in the shard directory after all the successful encodes" eval '! compgen -G "$W/s/*.tmp*" >/dev/null'

# ============================================================================================
# 5b. encode errors: one line naming the file and the problem, and no output left behind

printf 'fine\nNUL\0here\n' >"$W/nul.txt"
zstd -q -c "$W/wiki2000.txt" >"$W/wiki.zst"
head -c $(($(stat -c %s "$W/wiki.zst") / 2)) "$W/wiki.zst" >"$W/trunc.zst"
printf '{"text": "ok"}\n{"text": "unterminated\n' >"$W/malformed.jsonl"
printf '{"text": "ok"}\n{"text": "ok"}\n{"body": "no text key"}\n' >"$W/nokey.jsonl"
printf '{"text": 42}\n' >"$W/notstring.jsonl"
head -c 3000 /dev/urandom >"$W/garbage.model"
echo "not a directory" >"$W/regular"
D="$W/enc_out"  # every failed encode below writes into this directory, which must stay empty
mkdir -p "$D"

expect_fail "encode: missing input file" "$W/missing.txt" "No such file" -- \
    encode --input "$W/missing.txt" --output "$D/x.shard"
expect_fail "encode: invalid UTF-8 (0xff 0xfe) names the file and line 3" "$W/latin.txt" "line 3" "UTF-8" -- \
    encode --input "$W/latin.txt" --output "$D/x.shard"
expect_fail "encode: NUL byte names the file and line 2" "$W/nul.txt" "line 2" "NUL" -- \
    encode --input "$W/nul.txt" --output "$D/x.shard"
expect_fail "encode: truncated .zst input" "$W/trunc.zst" "zstd" -- \
    encode --input "$W/trunc.zst" --output "$D/x.shard"
expect_fail "encode: second input bad after a good first input" "$W/latin.txt" "line 3" -- \
    encode --input "$W/t.txt" --input "$W/latin.txt" --output "$D/x.shard"
expect_fail "encode: malformed jsonl line 2" "$W/malformed.jsonl" "line 2" "not valid JSON" -- \
    encode --input "$W/malformed.jsonl" --output "$D/x.shard"
expect_fail "encode: jsonl line 3 lacks the key text" "$W/nokey.jsonl" "line 3" '"text"' -- \
    encode --input "$W/nokey.jsonl" --output "$D/x.shard"
expect_fail "encode: --jsonl-key body missing from every line" "$W/r.jsonl" "line 1" '"body"' -- \
    encode --input "$W/r.jsonl" --jsonl-key body --output "$D/x.shard"
expect_fail "encode: jsonl field text is a number" "$W/notstring.jsonl" "line 1" -- \
    encode --input "$W/notstring.jsonl" --output "$D/x.shard"
expect_fail "encode: input is a directory" "$B/dir.shard" "directory" -- \
    encode --input "$B/dir.shard" --output "$D/x.shard"
expect_fail "encode: --model file missing" "$W/missing.model" -- \
    "$SEQTOK" encode --model "$W/missing.model" --input "$W/t.txt" --output "$D/x.shard"
expect_fail "encode: --model is random bytes" "$W/garbage.model" "not a SentencePiece model" -- \
    "$SEQTOK" encode --model "$W/garbage.model" --input "$W/t.txt" --output "$D/x.shard"
expect_fail "encode: --model is a text file" "$W/t2.txt" "not a SentencePiece model" -- \
    "$SEQTOK" encode --model "$W/t2.txt" --input "$W/t.txt" --output "$D/x.shard"
expect_fail "encode: without --output" "--output is required" -- encode --input "$W/t.txt"
expect_fail "encode: output under a directory that does not exist" "$D/nodir/x.shard" "No such file" -- \
    encode --input "$W/t.txt" --output "$D/nodir/x.shard"
expect_fail "encode: output whose parent is a regular file" "$W/regular/x.shard" "Not a directory" -- \
    encode --input "$W/t.txt" --output "$W/regular/x.shard"
mkdir -p "$D/isdir.shard"
expect_fail "encode: output path is an existing directory" "$D/isdir.shard" -- \
    encode --input "$W/t.txt" --output "$D/isdir.shard"
rmdir "$D/isdir.shard" 2>/dev/null
DETAIL="left behind: $(ls -A "$D" | tr '\n' ' ')"
check "no shard and no .tmp file left behind after the failed encodes" no_leftovers "$D"
cp "$W/s/three.shard" "$D/keep.shard"
expect_fail "encode: failing onto an existing shard" "$W/latin.txt" -- \
    encode --input "$W/latin.txt" --output "$D/keep.shard"
check "a failed encode leaves the existing shard untouched" same_file "$W/s/three.shard" "$D/keep.shard"
DETAIL="left behind: $(ls -A "$D" | tr '\n' ' ')"
check "no keep.shard.tmp.* left after the failed overwrite" [ "$(ls -A "$D")" = "keep.shard" ]

# Ctrl-C during encode: the input is a FIFO, so the encoder is waiting for input when the signal comes
# (SIGINT is ignored by background jobs until seqtok installs its handler, so there is no race)
mkfifo "$W/fifo"
"$SEQTOK" encode --quiet --model "$MODEL" --input "$W/fifo" --output "$D/int.shard" >"$OUT" 2>"$ERR" &
ENC_PID=$!
for _ in $(seq 200); do compgen -G "$D/int.shard.tmp.*" >/dev/null && break; sleep 0.05; done
sleep 0.2
kill -INT "$ENC_PID" 2>/dev/null
timeout 20 bash -c 'printf "some text\nmore text\n" >"$1"' _ "$W/fifo"
wait "$ENC_PID"
RC=$?
LINES=$(wc -l <"$ERR")
DETAIL="exit $RC, stderr: $(show "$ERR")"
check "encode interrupted by SIGINT: exit 1 and one line saying int.shard was not written" \
    eval '[ "$RC" = 1 ] && [ "$LINES" = 1 ] && grep -q "interrupted; $D/int.shard not written" "$ERR" && ! sanitizer_said'
DETAIL="left behind: $(ls -A "$D" | tr '\n' ' ')"
check "an interrupted encode leaves neither int.shard nor its .tmp file" [ "$(ls -A "$D")" = "keep.shard" ]

expect_fail "unknown option --outptu suggests --output" "--outptu" "--output" -- \
    encode --input "$W/t.txt" --outptu "$D/x.shard"
expect_fail "unknown option --modle suggests --model" "--modle" "'--model'" -- \
    "$SEQTOK" encode --modle "$MODEL" --input "$W/t.txt" --output "$D/x.shard"
expect_fail "decode --strat suggests --start" "--strat" "--start" -- decode --input "$W/s/t.shard" --strat 3
expect_fail "info --verfy suggests --verify" "--verfy" "--verify" -- "$SEQTOK" info --verfy "$W/s/t.shard"
expect_fail "seqtrain --confg suggests --config" "--confg" "--config" -- "$SEQTRAIN" --confg x.json
expect_fail "seqeval --contxt suggests --context" "--contxt" "--context" -- "$SEQEVAL" --plan --data x --contxt 5
expect_fail "seqtok unknown command" "unknown command 'encdoe'" -- "$SEQTOK" encdoe
expect_fail "encode --frame-tokens abc is not an integer" "--frame-tokens" "'abc'" -- \
    encode --frame-tokens abc --input "$W/t.txt" --output "$D/x.shard"
expect_fail "encode --level 99 is out of range" "--level" "out of range" -- \
    encode --level 99 --input "$W/t.txt" --output "$D/x.shard"
expect_fail "encode --output without a value" "--output needs a value" -- encode --input "$W/t.txt" --output

# ============================================================================================
# 5c/6. seqtrain: configs

C="$W/cfg"
cp "$W/s/wiki.shard" "$W/s/train_a.shard"
N_TRAIN=$(tokens_of "$W/s/train_a.shard")
N_VAL=$(tokens_of "$W/s/three.shard")
cat >"$C/good.json" <<EOF
{
  "run": {"seed": 7, "threads": 1},
  "data": {"train": "$W/s/train_*.shard", "val": ["$W/s/three.shard"]},
  "train": {"batch_size": 2, "seq_len": 16}
}
EOF
expect_ok "seqtrain --check on small train/val shards (seq_len 16, batch 2)" "$SEQTRAIN" --check --config "$C/good.json"
W_TRAIN=$(((N_TRAIN - 1) / 16))
check "data.train summary: 1 shard, $N_TRAIN tokens, vocab 8192, $W_TRAIN windows of 17 tokens" \
    out_has_re "^data\.train +1 shard +$N_TRAIN tokens +vocab 8192 +$W_TRAIN windows of 17 tokens = $((W_TRAIN / 2)) batches of 2$"
check "data.val summary: $N_VAL tokens, $(((N_VAL - 1) / 16)) windows" \
    out_has_re "^data\.val +1 shard +$N_VAL tokens +vocab 8192 +$(((N_VAL - 1) / 16)) windows of 17 tokens"
check "seqtrain --check ends with its verdict" out_has "config and data OK"
expect_ok "seqtrain --check with data.tokenizer and data.shuffle=false" "$SEQTRAIN" --check --config "$C/good.json" \
    --set "data.tokenizer=$MODEL" --set data.shuffle=false
check "first batch text is the start of wiki.valid (= Homarus gammarus =)" \
    out_has_re '^first training window, 16 tokens: ".*= Homarus gammarus ='
expect_ok "seqtrain --check with shuffle on and data.tokenizer prints a first window" "$SEQTRAIN" --check --config "$C/good.json" \
    --set "data.tokenizer=$MODEL"
check "shuffled first window is printed as 16 tokens of text" out_has 'first training window, 16 tokens: "'

expect_ok "--print-config" "$SEQTRAIN" --config "$C/good.json" --print-config
check "--print-config prints valid JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT"
check "--print-config fills in defaults (data.cache_mb 256, format auto, vocab_size 0, tokenizer \"\")" python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
d = c["data"]
assert d["cache_mb"] == 256 and d["format"] == "auto" and d["vocab_size"] == 0 and d["tokenizer"] == ""
assert c["data"]["test"] == [] and c["train"]["seq_len"] == 16 and c["run"]["seed"] == 7' "$OUT"
expect_ok "--print-config with --set train.seq_len=64" "$SEQTRAIN" --config "$C/good.json" --print-config \
    --set train.seq_len=64
check "--print-config reflects --set train.seq_len=64" \
    python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["train"]["seq_len"] == 64' "$OUT"
cat >"$C/child.json" <<'EOF'
{"base": "good.json", "train": {"batch_size": 4}}
EOF
expect_ok "--print-config of a config with a base" "$SEQTRAIN" --config "$C/child.json" --print-config
check "child config inherits data.train, seq_len 16 and seed 7 from its base and overrides batch_size 4" python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["train"]["batch_size"] == 4 and c["train"]["seq_len"] == 16, c["train"]
assert c["run"]["seed"] == 7 and c["data"]["train"] == [sys.argv[2]], c' "$OUT" "$W/s/train_*.shard"
run "$SEQTRAIN"
check "seqtrain without --config prints its usage on stderr and exits 2" eval '[ "$RC" = 2 ] && grep -q "usage: seqtrain" "$ERR"'
check "--config-docs documents train.seq_len" eval '"$SEQTRAIN" --config-docs | grep -q "seq_len"'

printf '{\n  "data": {"train": "x"},\n  "train": {"seq_len": 16,}\n}\n' >"$C/malformed.json"
expect_fail "malformed JSON names the file and line 3" "$C/malformed.json:3:" "invalid JSON" -- \
    "$SEQTRAIN" --config "$C/malformed.json"
expect_fail "missing config file" "$C/missing.json" "cannot open" -- "$SEQTRAIN" --config "$C/missing.json"
printf '{"data": {"train": "x"}, "train": {"seqlen": 16}}\n' >"$C/typo.json"
expect_fail "unknown key seqlen suggests train.seq_len" "$C/typo.json" "train.seqlen" "train.seq_len" -- \
    "$SEQTRAIN" --config "$C/typo.json"
printf '{"data": {"train": "x"}, "trian": {}}\n' >"$C/typo2.json"
expect_fail "unknown section trian suggests train" "$C/typo2.json" "'trian'" "'train'" -- \
    "$SEQTRAIN" --config "$C/typo2.json"
printf '{"data": {"train": "x"}, "train": {"seq_len": "64"}}\n' >"$C/type.json"
expect_fail "seq_len given as a string is a type error" "$C/type.json" "train.seq_len" "expected an integer" -- \
    "$SEQTRAIN" --config "$C/type.json"
printf '{"data": {"train": "x"}, "train": {"seq_len": 2.5}}\n' >"$C/frac.json"
expect_fail "seq_len 2.5 is not an integer" "$C/frac.json" "train.seq_len" "2.5" -- "$SEQTRAIN" --config "$C/frac.json"
printf '{"data": {"train": "x"}, "train": {"batch_size": 0}}\n' >"$C/range.json"
expect_fail "batch_size 0 is out of range" "$C/range.json" "train.batch_size" "out of range" -- \
    "$SEQTRAIN" --config "$C/range.json"
printf '{"data": {"train": "x", "format": "bin"}}\n' >"$C/enum.json"
expect_fail "data.format bin is not an allowed value" "$C/enum.json" "data.format" "not allowed" "raw_u16" -- \
    "$SEQTRAIN" --config "$C/enum.json"
printf '{"data": {"train": "x", "format": "seqtk"}}\n' >"$C/enum2.json"
expect_fail "data.format seqtk suggests seqtok" "$C/enum2.json" "did you mean 'seqtok'" -- \
    "$SEQTRAIN" --config "$C/enum2.json"
printf '{"data": {"train": "x", "shuffle": "yes"}}\n' >"$C/bool.json"
expect_fail "data.shuffle \"yes\" is not a boolean" "$C/bool.json" "data.shuffle" "true or false" -- \
    "$SEQTRAIN" --config "$C/bool.json"
printf '{"data": {"val": "x"}, "train": {"seq_len": 16}}\n' >"$C/notrain.json"
expect_fail "missing required data.train" "$C/notrain.json" "data.train: no training shards given" "data.task" -- \
    "$SEQTRAIN" --config "$C/notrain.json"
printf '{"data": {"train": "x"}, "data": {"train": "y"}}\n' >"$C/dup.json"
expect_fail "duplicate key data" "$C/dup.json" "duplicate key 'data'" -- "$SEQTRAIN" --config "$C/dup.json"
printf '[1, 2]\n' >"$C/list.json"
expect_fail "top level is a list, not an object" "$C/list.json" "JSON object" -- "$SEQTRAIN" --config "$C/list.json"
expect_fail "--set to an unknown key suggests train.seq_len" "--set train.seqlen=5" "train.seq_len" -- \
    "$SEQTRAIN" --config "$C/good.json" --set train.seqlen=5
expect_fail "--set without '='" "--set train.seq_len" "expected key=value" -- \
    "$SEQTRAIN" --config "$C/good.json" --set train.seq_len
expect_fail "--set with an empty key" "--set =5" "empty key" -- "$SEQTRAIN" --config "$C/good.json" --set =5
expect_fail "--set train.seq_len=0 is out of range and names --set" "--set train.seq_len=0" "out of range" -- \
    "$SEQTRAIN" --config "$C/good.json" --set train.seq_len=0
expect_fail "--set into a non-object" "--set train.seq_len.x=1" "not an object" -- \
    "$SEQTRAIN" --config "$C/good.json" --set train.seq_len.x=1
printf '{"base": "nothere.json", "data": {"train": "x"}}\n' >"$C/nobase.json"
expect_fail "base file missing" "$C/nobase.json" "nothere.json" "cannot open" -- "$SEQTRAIN" --config "$C/nobase.json"
printf '{"base": "cycle_b.json", "data": {"train": "x"}}\n' >"$C/cycle_a.json"
printf '{"base": "cycle_a.json"}\n' >"$C/cycle_b.json"
expect_fail "base cycle a -> b -> a" "cycle" "cycle_a.json" "cycle_b.json" -- "$SEQTRAIN" --config "$C/cycle_a.json"
printf '{"base": "self.json", "data": {"train": "x"}}\n' >"$C/self.json"
expect_fail "base naming itself is a cycle" "cycle" "self.json" -- "$SEQTRAIN" --config "$C/self.json"
printf '{"base": 5, "data": {"train": "x"}}\n' >"$C/basenum.json"
expect_fail "base given as a number" "$C/basenum.json" "base" -- "$SEQTRAIN" --config "$C/basenum.json"
printf '{"data": {"train": "%s/s/nomatch_*.shard"}}\n' "$W" >"$C/noglob.json"
expect_fail "data.train glob matching nothing" "data.train" "nomatch_*.shard" "matches no file" -- \
    "$SEQTRAIN" --check --config "$C/noglob.json"
printf '{"data": {"train": "%s/bad/version7.shard"}, "train": {"seq_len": 16, "batch_size": 2}}\n' "$W" >"$C/badshard.json"
expect_fail "data.train naming a shard of bad version" "data.train" "version7.shard" "unsupported version 7" -- \
    "$SEQTRAIN" --check --config "$C/badshard.json"
expect_fail "data.val with another vocab than data.train names the val shard" "data.val" "tiny.shard" "300" "8192" -- \
    "$SEQTRAIN" --check --config "$C/good.json" --set "data.val=$W/s/tiny.shard"
expect_fail "data.train mixing shards of two vocabularies" "tiny.shard" "vocab size" -- \
    "$SEQTRAIN" --check --config "$C/good.json" --set "data.train=[\"$W/s/wiki.shard\", \"$W/s/tiny.shard\"]"
# shards encoded with tiny_a, config names tiny_b (same vocab size, other model)
"$SEQTOK" encode --quiet --model "$W/tiny_a.model" --input "$W/corpus_a.txt" --output "$W/s/corp_a.shard" >/dev/null 2>&1
printf '{"data": {"train": "%s/s/corp_a.shard", "tokenizer": "%s/tiny_b.model"}, "train": {"seq_len": 16, "batch_size": 2}}\n' \
    "$W" "$W" >"$C/othertok.json"
expect_fail "data.tokenizer other than the shards' tokenizer" "data.tokenizer" "corp_a.shard" "tiny_b.model" -- \
    "$SEQTRAIN" --check --config "$C/othertok.json"
expect_ok "data.tokenizer matching the shards' tokenizer" "$SEQTRAIN" --check --config "$C/othertok.json" \
    --set "data.tokenizer=$W/tiny_a.model"
expect_fail "data.tokenizer of another vocab size (8192 vs 300)" "data.tokenizer" "8192" "300" -- \
    "$SEQTRAIN" --check --config "$C/othertok.json" --set "data.tokenizer=$MODEL"
expect_fail "data.tokenizer file missing" "$W/nothere.model" -- \
    "$SEQTRAIN" --check --config "$C/good.json" --set "data.tokenizer=$W/nothere.model"
expect_fail "seq_len longer than every shard: no window to read" "data.train" -- \
    "$SEQTRAIN" --check --config "$C/othertok.json" --set train.seq_len=1000000

# messages that point at the real mistake
cat >"$C/attn.json" <<EOF
{"base": "good.json", "model": {"n_layers": 4, "mixer": {"kind": "attention", "heads": 4}}}
EOF
expect_fail "--set model.mixer.kind=kla over an attention mixer suggests replacing the whole mixer" \
    "--set model.mixer.kind=kla: 'model.mixer.heads' (from $C/attn.json) is not an option of model.mixer.kind \"kla\"" \
    "--set 'model.mixer={\"kind\":\"kla\"}'" -- "$SEQTRAIN" --check --config "$C/attn.json" --set model.mixer.kind=kla
expect_ok "--set 'model.mixer={\"kind\":\"kla\"}' replaces it" "$SEQTRAIN" --check --config "$C/attn.json" \
    --set 'model.mixer={"kind":"kla"}'
expect_fail "a mistyped mixer option after a kind --set still gets its did-you-mean" \
    "--set model.mixer.d_stat=4: unknown key 'model.mixer.d_stat' (did you mean 'model.mixer.d_state'?)" -- \
    "$SEQTRAIN" --check --config "$C/attn.json" --set 'model.mixer={"kind":"kla"}' --set model.mixer.kind=kla \
    --set model.mixer.d_stat=4
expect_fail "a reversed layer range 3-1 is called reversed" \
    "model.layers[0].at: \"3-1\" has a reversed range" -- \
    "$SEQTRAIN" --check --config "$C/attn.json" --set 'model.layers=[{"at": "3-1", "mixer": {"heads": 2}}]'
expect_fail "a layer past the last is outside the range" "model.layers[0].at: \"4\" names a layer outside 0..3" -- \
    "$SEQTRAIN" --check --config "$C/attn.json" --set 'model.layers=[{"at": "4", "mixer": {"heads": 2}}]'
expect_ok "layer range 1-3 and -1 are accepted" "$SEQTRAIN" --check --config "$C/attn.json" \
    --set 'model.layers=[{"at": "1-3", "mixer": {"heads": 2}}, {"at": "-1", "mixer": {"heads": 1}}]'
printf '{"base": "good.json", "run": {"name": "caf\xe9"}}' >"$C/latin1.json"
expect_fail "a Latin-1 byte in a config string is refused with its key" \
    "$C/latin1.json: run.name: the string is not valid UTF-8 (byte 0xe9 at offset 3)" -- \
    "$SEQTRAIN" --check --config "$C/latin1.json"
expect_fail "a Latin-1 byte in a --set value is refused with its key" \
    "run.name: the string is not valid UTF-8 (byte 0xe9 at offset 3)" -- \
    "$SEQTRAIN" --check --config "$C/good.json" --set "$(printf 'run.name=caf\xe9')"

# out of memory names the keys that size the block (release build only: ASan needs more address space
# than the limit that makes the allocation fail)
if asan_build "$SEQTRAIN"; then
    ok "out-of-memory message (skipped: ASan build)"
else
    run bash -c 'ulimit -v 4000000 && exec "$@"' _ "$SEQTRAIN" --config "$C/good.json" --set "run.dir=$W/oomruns" \
        --set train.batch_size=4096 --set train.seq_len=16 --stop-after 1
    check "out of memory for the activations names train.batch_size, train.seq_len, model.n_layers, model.d_model" \
        eval '[ "$RC" -eq 1 ] && grep -qE "^error: out of memory allocating [0-9]+ bytes \([0-9.]+ MiB\) for the activations of a batch of 4096 x 16 tokens \(train.batch_size x train.seq_len when training\) through model.n_layers = [0-9]+ layers of model.d_model = [0-9]+ .*lower train.batch_size or train.seq_len" "$ERR"'
fi

# --resume removes the checkpoint directories that dead processes left half-written, never a live one's
R="$W/leftovers"
mkdir -p "$R"
cp "$C/good.json" "$R/config.json"
(exit 0) &
DEAD=$!
wait "$DEAD"
sleep 60 &
LIVE=$!
mkdir "$R/ckpt-00000004.tmp.$DEAD" "$R/ckpt-00000002.old.$DEAD" "$R/ckpt-00000004.tmp.$LIVE" "$R/ckpt-00000004.tmp.$$"
echo x >"$R/ckpt-00000004.tmp.$DEAD/model.safetensors"
echo ckpt-00000002 >"$R/latest"
run "$SEQTRAIN" --resume "$R"
kill "$LIVE" 2>/dev/null
wait "$LIVE" 2>/dev/null
check "--resume removes a dead process's ckpt-*.tmp.<pid>" eval '[ ! -e "$R/ckpt-00000004.tmp.$DEAD" ]'
check "--resume renames a dead process's ckpt-2.old.<pid> back to the missing ckpt-2 (killed mid-replace)" \
    eval '[ ! -e "$R/ckpt-00000002.old.$DEAD" ] && [ -d "$R/ckpt-00000002" ]'
check "--resume keeps the temp checkpoints of live processes (a sleep, the test shell)" \
    eval '[ -d "$R/ckpt-00000004.tmp.$LIVE" ] && [ -d "$R/ckpt-00000004.tmp.$$" ]'
check "--resume says what it removed and why" \
    grep -qF "removed $R/ckpt-00000004.tmp.$DEAD (an unfinished checkpoint left by process $DEAD, which is no longer running)" "$ERR"
check "--resume does not mention the live processes' directories" \
    eval '! grep -qE "tmp\.($LIVE|$$)" "$ERR"'
check "--resume says what it restored" grep -qF "restored $R/ckpt-00000002.old.$DEAD as ckpt-00000002" "$ERR"
check "--resume then reads the restored checkpoint" grep -qE "^seqtrain: error: .*$R/ckpt-00000002/" "$ERR"

# ============================================================================================
# 5d. seqeval

expect_fail "seqeval --data valid without --run" "--data valid needs --run" -- "$SEQEVAL" --plan --data valid
expect_fail "seqeval --context with a non-number" "--context" "512,abc" -- \
    "$SEQEVAL" --plan --data "$W/s/wiki.shard" --context 512,abc
expect_fail "seqeval --context 0 is out of range" "--context" "out of range" -- \
    "$SEQEVAL" --plan --data "$W/s/wiki.shard" --context 0
expect_ok "seqeval plan of the wiki shard at contexts 64 and 1000" \
    "$SEQEVAL" --plan --data "$W/s/wiki.shard" --context 64,1000
check "seqeval: context 64 has floor((N-1)/64) = $(((N_TRAIN - 1) / 64)) windows scoring $(((N_TRAIN - 1) / 64 * 64)) tokens" \
    out_has "| 64 | $(((N_TRAIN - 1) / 64)) | $(((N_TRAIN - 1) / 64 * 64)) |"
check "seqeval: context 1000 has floor((N-1)/1000) = $(((N_TRAIN - 1) / 1000)) windows" \
    out_has "| 1000 | $(((N_TRAIN - 1) / 1000)) |"
expect_ok "seqeval on a raw_u16 file with --vocab" "$SEQEVAL" --plan --data "$W/s/r16.bin" --format raw_u16 --vocab 1000 --context 1,3
check "seqeval raw_u16 of 4 tokens: context 1 -> 3 windows, context 3 -> 1 window" \
    eval 'out_has "| 1 | 3 | 3 |" && out_has "| 3 | 1 | 3 |"'

# ============================================================================================
# scripts/safetensors_read.py piped into a reader that stops early (`| head -1`, `| head -c 0`) ends
# quietly: no BrokenPipeError traceback, no "Exception ignored" message
# (a file of 4000 one-element tensors: ~200 KB of output, more than a pipe holds, so the writer does meet
# the closed pipe)
ST="$W/many.safetensors"
/usr/bin/python3 - "$ST" <<'PY'
import json, struct, sys
n = 4000
hdr = {"t%05d" % i: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(n)}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + struct.pack("<%df" % n, *range(n)))
PY
/usr/bin/python3 "$ROOT/scripts/safetensors_read.py" "$ST" 2>"$ERR" | head -1 >"$OUT"
check "safetensors_read.py FILE | head -1: one line, nothing on stderr" \
    eval '[ "$(wc -l <"$OUT")" = 1 ] && [ ! -s "$ERR" ]'
/usr/bin/python3 "$ROOT/scripts/safetensors_read.py" "$ST" 2>"$ERR" | head -c 0
check "safetensors_read.py FILE | head -c 0 (reader gone before the first write): nothing on stderr" \
    eval '[ ! -s "$ERR" ]'

# --- the environment in --help, and a bad SEQ_KERNELS
expect_ok "SEQ_KERNELS=generic seqtrain --help" env SEQ_KERNELS=generic "$SEQTRAIN" --help
check "seqtrain --help names SEQ_KERNELS with the set in use and this CPU's" out_has "(active: generic; this CPU and build:"
expect_ok "seqeval --help" "$SEQEVAL" --help
check "seqeval --help names SEQ_KERNELS, SEQ_PROFILE and OMP_NUM_THREADS" \
    eval 'out_has "SEQ_KERNELS=SET" && out_has "SEQ_PROFILE=1" && out_has "OMP_NUM_THREADS=N"'
expect_fail "SEQ_KERNELS=avx3: one line naming the choices" 'SEQ_KERNELS: unknown kernel set "avx3"' \
    "auto, avx512, avx2 or generic" -- env SEQ_KERNELS=avx3 "$SEQTRAIN" --help

test_done
