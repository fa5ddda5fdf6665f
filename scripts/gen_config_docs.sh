#!/usr/bin/env bash
# Regenerates docs/config.md from the config schema compiled into seqtrain (src/run/run_config.c and each
# mixer's options), so the reference lists exactly the keys the program accepts. tests/test_docs.sh fails when it is stale.
#   scripts/gen_config_docs.sh [OUT]   (default docs/config.md; BIN=dir picks the build, default bin)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
OUT=${1:-docs/config.md}
{
cat <<'MD'
# Configuration reference

A run is described by one JSON file (`seqtrain --config FILE.json`). This page is generated from the schema
compiled into the program (`scripts/gen_config_docs.sh`, which runs `seqtrain --config-docs`), so it lists
exactly the keys that exist.

## How a configuration is resolved

1. **Inheritance.** A file may start with `"base": "other.json"` (or a list of files): the bases are loaded
   first (paths relative to the file that names them, recursively; a cycle is an error; a file named again,
   by another file or twice in one list, is read once and its merged result reused), then the file is
   deep-merged over them: objects merge key by key, every other value (numbers, strings, lists) replaces
   the base's value whole. An object whose `"kind"` differs from the base's (a `kla` mixer over an
   `attention` one, another schedule or task) replaces it whole too: one kind's options mean nothing to
   another.
2. **Overrides.** `--set key.path=value` (repeatable) is applied last. The value is read as JSON when it is
   valid JSON (`--set train.seq_len=256`, `--set data.shuffle=false`, `--set 'data.train=["a","b"]'`),
   otherwise as a plain string (`--set run.name=baseline`). An object value merges like a child file
   (`--set 'model.mixer={"pos": "alibi"}'` keeps the other mixer options; `--set 'model.mixer={"kind": "kla"}'`
   over an attention mixer starts from the kla defaults).
3. **Validation.** Every key must be one listed below, with the right type and inside its range; a key
   left out takes its default. Any violation stops the program with one line naming the file (or the
   `--set`) that set the value, the key's full path, the bad value, what is allowed, and a did-you-mean
   for near misses, e.g.
   `configs/x.json: unknown key 'train.seqlen' (did you mean 'train.seq_len'?)`. Strings and key names
   must be UTF-8 (they reach run names and the run's `config.json`). A dotted `--set model.mixer.kind=kla`
   changes only the kind and keeps the other options, so over an `attention` mixer it fails (suggesting
   `--set 'model.mixer={"kind":"kla"}'`).
4. `seqtrain --config FILE --print-config` prints the resolved configuration (every key, defaults
   filled in); feeding that output back as a config gives the same run.

MD
"$BIN/seqtrain" --config-docs | sed 's/^## top level$/## Sections/'
} > "$OUT"
