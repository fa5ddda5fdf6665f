#!/usr/bin/env bash
# docs/config.md must be what scripts/gen_config_docs.sh generates from the compiled schema, and every
# key of the schema must appear in it (a key cannot exist undocumented).
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
pass=0; fail=0
ok()     { echo "ok - $1"; pass=$((pass+1)); }
not_ok() { echo "not ok - $1 ($2)"; fail=$((fail+1)); }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
if BIN=$BIN bash scripts/gen_config_docs.sh "$tmp" 2>/dev/null && diff -q "$tmp" docs/config.md >/dev/null; then
    ok "docs/config.md matches the compiled config schema"
else
    not_ok "docs/config.md matches the compiled config schema" "run scripts/gen_config_docs.sh"
fi
# every key of the resolved default config is documented in the table of its section
keys=$("$BIN/seqtrain" --config configs/quickstart.json --print-config | python3 -c '
import json, sys
def walk(d, p):
    for k, v in d.items():
        if isinstance(v, dict): walk(v, p + [k])
        else: print(".".join(p + [k]))
walk(json.load(sys.stdin), [])')
for k in $keys; do
    sec=${k%.*}; name=${k##*.}
    if awk -v s="## $sec" '$0==s{on=1;next} /^## /{on=0} on' docs/config.md | grep -q "^| \`$name\` |"; then
        ok "config key $k is documented"
    else
        not_ok "config key $k is documented" "not in section $sec of docs/config.md"
    fi
done
for f in configs/*.json; do
    if "$BIN/seqtrain" --config "$f" --print-config >/dev/null 2>"$tmp"; then ok "$f validates"
    else not_ok "$f validates" "$(head -c 300 "$tmp")"; fi
done
echo "$pass passed, $fail failed" >&2
[ "$fail" -eq 0 ]
