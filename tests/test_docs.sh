#!/usr/bin/env bash
# docs/config.md must be what scripts/gen_config_docs.sh generates from the compiled schema, every key of
# the resolved config must have a row in its section's table (a key cannot exist undocumented), and every
# config in configs/ must validate. A runs/quickstart/ckpt-<step> named in README.md or docs/ must be one
# that `make run` leaves.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
source tests/lib.sh || exit 2
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
for f in configs/*.json configs/*/*.json configs/*/*/*.json configs/*/*/*/*.json; do
    [ -f "$f" ] || continue
    if "$BIN/seqtrain" --config "$f" --print-config >/dev/null 2>"$tmp"; then ok "$f validates"
    else not_ok "$f validates" "$(head -c 300 "$tmp")"; fi
done
# every runs/quickstart/ckpt-<step> the docs name is a checkpoint that `make run` leaves there: the steps
# come from `seqtrain --check` on the prepared WikiText-2 shards (prepare_wikitext2.sh, as `make run` does;
# a few seconds, and nothing when they are up to date), the kept ones from ckpt_every and keep_last
if SEQTOK="$BIN/seqtok" bash scripts/prepare_wikitext2.sh >"$tmp" 2>&1 &&
   "$BIN/seqtrain" --config configs/quickstart.json --check >"$tmp.check" 2>&1 &&
   "$BIN/seqtrain" --config configs/quickstart.json --print-config >"$tmp.json" 2>>"$tmp"; then
    while IFS=$'\t' read -r status what; do
        if [ "$status" = ok ]; then ok "$what"; else not_ok "$what" "$status"; fi
    done < <(python3 - "$tmp.check" "$tmp.json" README.md docs/*.md <<'PY'
import json, re, sys
check, cfg = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
m = re.search(r"(\d+) steps x", check)
if not m:
    print("no 'N steps x' line in seqtrain --check\tquickstart checkpoints named in the docs"); sys.exit()
steps, every, keep = int(m.group(1)), cfg["train"]["ckpt_every"], cfg["train"]["keep_last"]
written = sorted(set(([s for s in range(every, steps + 1, every)] if every else []) + [steps]))
kept = written[-keep:]
for doc in sys.argv[3:]:
    for n in sorted(set(re.findall(r"runs/quickstart/ckpt-(\d{8})", open(doc).read()))):
        what = "%s names runs/quickstart/ckpt-%s, which make run leaves" % (doc, n)
        print(("ok" if int(n) in kept else "the quickstart's %d steps leave %s" %
               (steps, ", ".join("ckpt-%08d" % k for k in kept))) + "\t" + what)
PY
)
else
    not_ok "quickstart checkpoints named in the docs" "could not prepare the data or check the quickstart: $(tail -c 300 "$tmp" "$tmp.check" 2>&1)"
fi
rm -f "$tmp.check" "$tmp.json"

# README's first command works on a minimal Debian 12, which has no make: it is ./setup, which installs
# the missing packages (make among them) with dpkg and apt-get alone. Run here with stand-ins for dpkg (make
# and python3-numpy "missing"), apt-get (records its arguments), id (root) and make (fails if called).
first=$(awk '/^```/{n++; next} n==1{print; exit}' README.md)
case "$first" in
    ./setup*) ok "README's first command is ./setup" ;;
    *) not_ok "README's first command is ./setup" "it is: $first" ;;
esac
stub=$(mktemp -d)
cat > "$stub/dpkg" <<'SH'
#!/bin/sh
case "$2" in make|python3-numpy) exit 1 ;; esac
exit 0
SH
printf '#!/bin/sh\necho "$*" >> "%s/apt.log"\n' "$stub" > "$stub/apt-get"
printf '#!/bin/sh\necho "make $*" >> "%s/make.log"\nexit 1\n' "$stub" > "$stub/make"
printf '#!/bin/sh\necho 0\n' > "$stub/id"
chmod +x "$stub"/*
: > "$tmp"
if [ -x setup ] && PATH="$stub:$PATH" ./setup > "$tmp" 2>&1 && grep -q -- "install .*make python3-numpy" "$stub/apt.log" 2>/dev/null \
   && [ ! -e "$stub/make.log" ]; then
    ok "./setup installs the missing packages (make, python3-numpy) with apt-get, without make"
else
    not_ok "./setup installs the missing packages with apt-get, without make" \
        "$(ls -l setup 2>&1 | head -c 100); $(tail -c 200 "$tmp"); apt-get: $(cat "$stub/apt.log" 2>&1); make: $(cat "$stub/make.log" 2>&1)"
fi
rm -rf "$stub"
# README's package list is scripts/install_deps.sh's
want=$(sed -n 's/^need=(\(.*\))$/\1/p' scripts/install_deps.sh)
if [ -n "$want" ] && tr '\n' ' ' < README.md | grep -qF -- "(\`$want\`, see \`scripts/install_deps.sh\`"; then
    ok "README lists the packages of scripts/install_deps.sh"
else
    not_ok "README lists the packages of scripts/install_deps.sh" "install_deps.sh: $want"
fi
test_done
