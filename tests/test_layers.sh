#!/usr/bin/env bash
# The layers of src/ call only downward: every #include "folder/file.h" in src/ names its own folder or one that
# docs/design.md's layer table lets that folder include. The table is read from the document, so the map a
# newcomer reads is the one the code keeps.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh || exit 2
# rows "| `layer` | what | deps |" of the table under "| layer |" -> "layer:deps"
table=$(sed -n '/^| layer |/,/^$/p' docs/design.md | awk -F'|' '/^\| `/ { gsub(/[` ]/, "", $2); print $2 ":" $4 }')
[ -n "$table" ] && ok "docs/design.md has a layer table" || not_ok "docs/design.md has a layer table" "none found"
declare -A allowed
while IFS=: read -r layer deps; do allowed[$layer]=" $layer $deps "; done <<< "$table"
for d in src/*/; do
    d=$(basename "$d")
    [ -n "${allowed[$d]:-}" ] && ok "src/$d/ is in the layer table" || not_ok "src/$d/ is in the layer table" "missing"
done
bad=0
while IFS= read -r line; do
    file=${line%%:*}
    folder=$(basename "$(dirname "$file")")
    inc=$(sed 's/.*#include "\([a-z_0-9]*\)\/.*/\1/' <<< "${line#*:}")
    if [[ "${allowed[$folder]:-}" != *" $inc "* ]]; then
        not_ok "$file includes only from the layers below it" "it includes $inc/"
        bad=$((bad + 1))
    fi
done < <(grep -HE '^\s*#\s*include "[a-z_0-9]+/' src/*/*.c src/*/*.h src/*/*.cc src/*/*.cu src/*/*.cuh)
[ "$bad" -eq 0 ] && ok "every #include in src/ follows the layer table"
test_done
