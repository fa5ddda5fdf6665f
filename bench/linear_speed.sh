#!/usr/bin/env bash
# Linear-mixer speed (not a test), in one invocation on the same threads:
#   1. training tokens/s of the 6-layer d=256 benchmark model (bench/configs/speed_rope.json) with each mixer
#      in place of its RoPE attention, at T = 512, 2048, 8192 (B T = 4096 tokens a step: B = 8, 2, 1 ... so the
#      work per step is the same and only the mixer's dependence on T differs), with each mixer's ratio to
#      attention at the same T and where it overtakes attention (the first T at which its tokens/s is higher);
#      Rows at one decoding state per layer (the BLA paper's Table 1): gla_k1 H dk dv = 4 64 64 = 16384, bla_m16
#      (and with decay) H (dk + dv)(2M - 1) = 4 128 31 = 15872, attn_swa31 H (dk + dv) w = 4 128 31 = 15872;
#   2. the engine's chunked forward + backward against the naive sequential scan (build/release/bench/linrec),
#      with the exponent p of its time per sequence ~ T^p.
#
#   bash bench/linear_speed.sh                    # THREADS = nproc, STEPS = 6, every mixer
#   THREADS=16 TS=512,2048,8192 MIXERS="attn_rope gla mamba2" bash bench/linear_speed.sh OUT.md
#   ENGINE=0 MIXERS="attn_rope bla_m16 gla_k1 attn_swa31" bash bench/linear_speed.sh   # part 1 only
#
# seqtrain's tokens/s is the median of log.jsonl's per-step tokens_per_s after the first 2 steps. The fused
# mixers (mamba2, mlstm; kla) have no separate MLP, as their references: their rows are a different model (fewer
# parameters: the parameter count is printed), the others keep the GELU MLP of the benchmark model.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-6}
TS=${TS:-512,2048,8192}
TOKENS=${TOKENS:-4096}
ENGINE=${ENGINE:-1}  # 0: only part 1 (the model rows)
CONFIG=${CONFIG:-bench/configs/speed_rope.json}
OUTFILE=${1:-}
RUN_DIR=$(mktemp -d /tmp/seqtrain_linear_speed.XXXXXX)
trap 'rm -rf "$RUN_DIR"' EXIT
if [ "$STEPS" -le 2 ]; then echo "linear_speed: STEPS must be > 2 (the first 2 steps are not timed)" >&2; exit 2; fi

# id | model.mixer (merged into the config's attention mixer, replaced when the kind differs)
ROWS=(
    'attn_rope|{"kind":"attention","heads":8,"head_dim":64,"pos":"rope"}'
    'linear_attn|{"kind":"linear_attn","heads":4}'
    'retnet|{"kind":"retnet","heads":4}'
    'gla|{"kind":"gla","heads":4}'
    'mamba2|{"kind":"mamba2","d_state":64}'
    'mlstm|{"kind":"mlstm","heads":4}'
    'deltanet|{"kind":"deltanet","heads":4}'
    'gated_deltanet|{"kind":"gated_deltanet","heads":4}'
    'gsa|{"kind":"gsa","heads":4}'
    'attn_path|{"kind":"attention","heads":8,"head_dim":64,"pos":"path"}'
    'attn_path_fox|{"kind":"attention","heads":8,"head_dim":64,"pos":"path_fox"}'
    'attn_fox|{"kind":"attention","heads":8,"head_dim":64,"pos":"fox"}'
    'attn_fox_selrope|{"kind":"attention","heads":8,"head_dim":64,"pos":"fox","selective_rope":{"enabled":true}}'
    'gla_selrope|{"kind":"gla","heads":4,"selective_rope":{"enabled":true}}'
    'gated_deltanet_selrope|{"kind":"gated_deltanet","heads":4,"selective_rope":{"enabled":true}}'
    'gla_k1|{"kind":"gla","heads":4,"expand_k":1}'
    'bla_m16|{"kind":"bla","heads":4,"modes":16}'
    'bla_m16_decay|{"kind":"bla","heads":4,"modes":16,"decay":true}'
    'attn_swa31|{"kind":"attention","heads":4,"head_dim":64,"pos":"rope","window":31}'
)
all=""; for r in "${ROWS[@]}"; do all+="${r%%|*} "; done
MIXERS=${MIXERS:-$all}

source bench/common.sh  # bench_setup (in section) brings bin/ and build/release/bench/linrec up to date

section() {
    bench_setup linear_speed "$STEPS steps, $THREADS threads, T = $TS, $TOKENS tokens a step" | sed 's/^linear_speed: /- /'
    echo
    echo "| mixer | parameters | $(tr ',' '\n' <<< "$TS" | sed 's/.*/T = & tok\/s/' | paste -sd'|' | sed 's/|/ | /g') | overtakes attention at |"
    echo "|---|---:|$(tr ',' '\n' <<< "$TS" | sed 's/.*/---:/' | paste -sd'|')|---|"
    declare -A att
    for id in $MIXERS; do
        spec=""
        for r in "${ROWS[@]}"; do [ "${r%%|*}" = "$id" ] && spec=${r#*|}; done
        [ -n "$spec" ] || { echo "linear_speed: unknown mixer '$id' (known: $all)" >&2; exit 2; }
        row="| $id |"; params="?"; over=""
        for T in ${TS//,/ }; do
            B=$(( TOKENS / T )); [ "$B" -ge 1 ] || B=1
            log="$RUN_DIR/$id-$T.out"
            if env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" bin/seqtrain --config "$CONFIG" \
                   --set "model.mixer=$spec" --set train.seq_len="$T" --set train.batch_size="$B" \
                   --set run.dir="$RUN_DIR" --set run.name="$id-$T" --set train.steps="$STEPS" \
                   --set run.threads="$THREADS" >"$log" 2>&1; then
                tps=$(python3 - "$RUN_DIR/$id-$T/log.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{statistics.median([r['tokens_per_s'] for r in rows if r['step'] > 2 and 'tokens_per_s' in r]):.0f}")
EOF
)
                params=$(sed -n 's/.* \([0-9][0-9]*\) parameters.*/\1/p' "$log" | head -n 1)
            else
                tps="failed"; tail -n 5 "$log" >&2
            fi
            if [ "$id" = attn_rope ]; then att[$T]=$tps; cell=$tps
            elif [ -n "${att[$T]:-}" ] && [ "$tps" != failed ]; then
                cell="$tps ($(python3 -c "print(f'{$tps / ${att[$T]}:.2f}')")x)"
                [ -z "$over" ] && python3 -c "import sys; sys.exit(0 if $tps > ${att[$T]} else 1)" && over="T = $T"
            else cell=$tps; fi
            row+=" $cell |"
        done
        [ "$id" = attn_rope ] && over="-"
        echo "$row" | sed "s/^| $id |/| $id | $params |/" | sed "s/|\$/| ${over:-not at these T} |/"
    done
    [ "$ENGINE" = 1 ] || return 0
    echo
    echo "Engine alone (nn/linrec.h, B T = 32768 tokens a call, H = 4, Dk = Dv = 64, chunk 64):"
    echo
    OMP_NUM_THREADS=$THREADS build/release/bench/linrec --T "$TS"
}

if [ -n "$OUTFILE" ]; then
    section > "$OUTFILE.tmp"
    mv "$OUTFILE.tmp" "$OUTFILE"
    echo "linear_speed: wrote $OUTFILE" >&2
else
    section
fi
