#!/usr/bin/env bash
# docs/config.md must be what scripts/gen_config_docs.sh generates from the compiled schema, every key of
# the resolved config must have a row in its section's table (a key cannot exist undocumented), and every
# config in configs/ must validate.
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
# every key of the resolved default config has a row in the table of its section; objects that have
# their own "## path" section are walked into, other objects (a mixer's options) are one documented key
"$BIN/seqtrain" --config configs/quickstart.json --print-config > "$tmp.json"
while IFS=$'\t' read -r status key; do
    if [ "$status" = ok ]; then ok "config key $key is documented"; else not_ok "config key $key is documented" "$status"; fi
done < <(python3 - "$tmp.json" docs/config.md <<'PY'
import json, re, sys
cfg = json.load(open(sys.argv[1]))
sections, cur = {}, None
for line in open(sys.argv[2]):
    m = re.match(r"^## (\S+)$", line.rstrip("\n"))
    if m:
        cur = m.group(1); sections[cur] = set(); continue
    m = re.match(r"^\| `([^`]+)` \|", line)
    if m and cur: sections[cur].add(m.group(1))
def walk(d, path):
    for k, v in d.items():
        full = ".".join(path + [k])
        if isinstance(v, dict) and full in sections:
            walk(v, path + [k]); continue
        sec = ".".join(path)
        print(("ok" if k in sections.get(sec, ()) else "not in section " + sec) + "\t" + full)
walk(cfg, [])
PY
)
rm -f "$tmp.json"
for f in configs/*.json configs/*/*.json configs/*/*/*.json; do
    [ -f "$f" ] || continue
    if "$BIN/seqtrain" --config "$f" --print-config >/dev/null 2>"$tmp"; then ok "$f validates"
    else not_ok "$f validates" "$(head -c 300 "$tmp")"; fi
done
echo "$pass passed, $fail failed" >&2
[ "$fail" -eq 0 ]
