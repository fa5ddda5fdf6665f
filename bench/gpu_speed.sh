#!/usr/bin/env bash
# GPU training-speed benchmark (not a test): seqtrain's CUDA backend against PyTorch 2.x (attention) and
# flash-linear-attention and a chunked PyTorch model (the linear family) on the same GPU, the same models and
# batches, in one invocation.
#
#   bash bench/gpu_speed.sh                                  # every row below, STEPS=20
#   ROWS="bench8 gpt2" PRECISIONS="tf32 bf16" TORCH="eager" bash bench/gpu_speed.sh
#   ROWS="gla64 gla8 att4k" PRECISIONS=bf16 FLA=.anchors/fla bash bench/gpu_speed.sh
#
# Rows (ROWS, default bench8 bench64 gpt2): bench8 = the benchmark model (bench/configs/speed_rope.json: 6 layers, d 256,
# 8 heads x 64, RoPE, GELU MLP 4x, tied head, vocab 8192) at B 8, T 512; bench64 = the same at B 64; gpt2 = a
# GPT-2-small-sized model (bench/configs/gpt2_small.json: 12 layers, d 768, 12 heads x 64, T 1024, B 8; the
# WikiText-2 tokenizer's vocabulary of 8192, not GPT-2's 50257). Each row runs in every precision of PRECISIONS
# (fp32 tf32 bf16): seqtrain with run.device cuda and run.precision P, PyTorch (bench/torch_train.py --device cuda:
# fp32 = no TF32 matmuls, tf32 = TF32 matmuls, bf16 = autocast) eager with scaled_dot_product_attention and, with
# TORCH containing compile, under torch.compile. PyTorch's RoPE, LayerNorm, GELU, tied head, cross-entropy,
# clipping and AdamW (foreach) are the same model's (bench/torch_train.py).
# The Selective RoPE rows gla64sr, gla8sr, gdn64sr, gdn8sr: the same models with model.mixer.selective_rope on
# (bench/configs/speed_*_selrope.json: the defaults, low rank 16 and the conv over phi), against the Selective RoPE
# authors' GLA and Gated DeltaNet models (their package, SELROPE=DIR/src on PYTHONPATH beside FLA; their module's
# SELROPE_BACKEND, default torch: its triton kernel did not compile under the device's Triton, PyTorch 2.11: "T
# marked as constexpr and listed in do_not_specialize"); beside the rows without it they give each side's overhead.
# The linear family's rows: gla64 = a GLA language model at the benchmark size (bench/configs/speed_gla.json: 6
# layers, d 256, gla with 4 heads, expand_k 0.5, expand_v 1, RMSNorm, SwiGLU MLP of 768, untied head, vocab 8192:
# FLA's GLAForCausalLM's architecture) at B 64, T 512; gla8 = the same at B 8, T 4096; att4k = the attention model
# of bench8 at B 8, T 4096 (its reference rows are PyTorch's), for GLA against attention per token at T 4096. The
# GLA rows' reference is FLA's own GLAForCausalLM built from the same config (bench/fla_train.py, FLA from FLA=DIR:
# a source snapshot put on PYTHONPATH), fp32 with TF32 off, tf32 with it on, bf16 under autocast. Differences
# between the two models: FLA's fused kernels (norm, SwiGLU, cross-entropy) and its init; the parameter counts are
# printed. gdn64 and gdn8: the same for a Gated DeltaNet language model (bench/configs/speed_gdn.json: 4 heads of
# 64 keys and 128 values, short convs of 4, the output gate, chunk 64; FLA's GatedDeltaNetForCausalLM). FLA
# refuses that model's backward on Hopper with Triton < 3.7.1 (its gated chunk_bwd_dqkwg is miscompiled there, FLA
# #640): the gdn rows then also time FLA with that check overridden (bench/fla_train.py --bypass-hopper-guard),
# a speed reference whose gradients may be wrong. With TORCH containing compile (eager), the gla and gdn rows also
# time seqtrain's own model in plain PyTorch, "PyTorch chunked (torch.compile)" ("... (eager)"):
# bench/torch_linear_train.py, seqtrain's parameter names, shapes and count, the recurrences in chunked form as
# src/nn/linrec.c and src/nn/delta.c run them (chunk 64: GLA's per-channel decays in sub-chunks of 16 with every
# exponent <= 0, Gated DeltaNet's WY/UT triangular solve, a state carried from chunk to chunk), checked on the CPU
# against scripts/torch_ref's float64 layers and model (tests/test_torch_linear_train.sh).
#
# tokens/s: the median over the timed steps (seqtrain: log.jsonl's steps after the first 3; PyTorch: after 3
# warmup steps, which also compile; FLA: the same, after an untimed run of the same model that fills Triton's cache,
# FLA_WARM=0 to skip it). Memory: seqtrain's gpu_mem_mib (device memory in use beyond its context)
# against torch.cuda.max_memory_allocated (its allocator's peak; its context and cache slack not counted).
# A precision seqtrain refuses (bf16 before it exists) is printed as "refused" with its message.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-20}
ROWS=${ROWS:-bench8 bench64 gpt2}
PRECISIONS=${PRECISIONS:-fp32 tf32 bf16}
TORCH=${TORCH:-eager compile}
FLA=${FLA:-.anchors/fla}
SELROPE=${SELROPE:-.anchors/selective-rope}
SELROPE_BACKEND=${SELROPE_BACKEND:-torch}
FLA_WARM=${FLA_WARM:-1}
PY=${PY:-python3}
SEQ=${SEQ:-build/cuda/bin/seqtrain}
RUN_DIR=$(mktemp -d /tmp/seqtrain_gpu_speed.XXXXXX)
trap 'rm -rf "$RUN_DIR"' EXIT
if [ "$STEPS" -le 5 ]; then echo "gpu_speed: STEPS must be > 5 (3 warmup steps)" >&2; exit 1; fi
make -s -j"$(nproc)" CUDA=1 tools >&2  # up to date with the sources (make does nothing when it is)
[ -f build/data/wikitext2/train.shard ] || make data
command -v nvidia-smi >/dev/null && echo "gpu_speed: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
echo "gpu_speed: $(lscpu | sed -n 's/^Model name: *//p'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $STEPS steps"
echo "gpu_speed: $("$PY" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda)')"

row_of() {  # row -> "config B T"
    case $1 in
        bench8) echo "bench/configs/speed_rope.json 8 512";;
        bench64) echo "bench/configs/speed_rope.json 64 512";;
        gpt2) echo "bench/configs/gpt2_small.json 8 1024";;
        att4k) echo "bench/configs/speed_rope.json 8 4096";;
        gla64) echo "bench/configs/speed_gla.json 64 512";;
        gla8) echo "bench/configs/speed_gla.json 8 4096";;
        gdn64) echo "bench/configs/speed_gdn.json 64 512";;
        gdn8) echo "bench/configs/speed_gdn.json 8 4096";;
        gla64sr) echo "bench/configs/speed_gla_selrope.json 64 512";;
        gla8sr) echo "bench/configs/speed_gla_selrope.json 8 4096";;
        gdn64sr) echo "bench/configs/speed_gdn_selrope.json 64 512";;
        gdn8sr) echo "bench/configs/speed_gdn_selrope.json 8 4096";;
        *) echo "gpu_speed: unknown row '$1' (bench8, bench64, gpt2, att4k, gla64, gla8, gdn64, gdn8, gla64sr, gla8sr," \
                "gdn64sr, gdn8sr)" >&2; exit 1;;
    esac
}

# seqtrain ROW_NAME CONFIG B T PRECISION -> "tokens/s mem_mib" or "refused"
seqtrain_run() {
    local name=$1 cfg=$2 B=$3 T=$4 p=$5 out="$RUN_DIR/$1-$5.out"
    if ! "$SEQ" --config "$cfg" --set run.dir="$RUN_DIR" --set run.name="$name-$p" --set run.device=cuda \
        --set run.precision="$p" --set train.batch_size="$B" --set train.seq_len="$T" --set train.steps="$STEPS" \
        --set train.ckpt_every=0 --quiet >"$out" 2>&1; then
        echo "gpu_speed: seqtrain $name $p: $(tail -1 "$out")" >&2
        echo "refused"
        return
    fi
    "$PY" - "$RUN_DIR/$name-$p/log.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
tps = [r["tokens_per_s"] for r in rows if r["step"] > 3]
print(f"{statistics.median(tps):.0f} {max(r['gpu_mem_mib'] for r in rows):.0f}")
PY
    rm -rf "$RUN_DIR/$name-$p"
}

# torch_run CONFIG B T PRECISION MODE(eager|compile) -> "tokens/s mem_mib" or "failed"
torch_run() {
    local cfg=$1 B=$2 T=$3 p=$4 mode=$5 args line
    args=$("$SEQ" --config "$cfg" --set train.batch_size="$B" --set train.seq_len="$T" --print-config \
        | "$PY" bench/model_cost.py torch-args)
    line=$("$PY" bench/torch_train.py --device cuda --precision "$p" $args --qkv fused --attn sdpa --warmup 3 \
        --steps $((STEPS - 3)) $([ "$mode" = compile ] && echo --compile) 2>"$RUN_DIR/torch.err" \
        | grep '^torch_train: .*tokens_per_s=' || true)
    if [ -z "$line" ]; then echo "gpu_speed: torch $mode $p: $(tail -1 "$RUN_DIR/torch.err")" >&2; echo "failed"; return; fi
    rate_mem "$line"
}

# rate_mem RESULT_LINE -> "tokens/s mem_mib": the tokens_per_s= and peak_mem_mib= fields of a reference's result line
rate_mem() {
    echo "$(echo "$1" | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p') $(echo "$1" | sed -n 's/.*peak_mem_mib=\([0-9]*\).*/\1/p')"
}

# fla_train CONFIG B T PRECISION STEPS [FLAGS]: bench/fla_train.py on CONFIG's model, its output lines
fla_train() {
    local cfg=$1 B=$2 T=$3 p=$4 n=$5 flags=${6:-}
    # shellcheck disable=SC2086  # FLAGS split on purpose
    "$SEQ" --config "$cfg" --set train.batch_size="$B" --set train.seq_len="$T" --print-config \
        | PYTHONPATH="$FLA:$SELROPE/src" "$PY" bench/fla_train.py --precision "$p" --batch-size "$B" --seq-len "$T" \
            --selrope-backend "$SELROPE_BACKEND" --warmup 3 \
            --steps "$n" $flags 2>"$RUN_DIR/fla.err"
}

# fla_run CONFIG B T PRECISION [FLAGS] -> "tokens/s mem_mib" or "failed": FLA's model of CONFIG (bench/fla_train.py).
# With FLA_WARM=1 (the default) an untimed run of the same model goes first: Triton's autotuning and compilation
# then sit in its cache before the timed run, whose 3 warmup steps do not always absorb them (a cold cache measured
# the same FLA model at 0.69x of its warm speed, docs/gpu.md)
fla_run() {
    local cfg=$1 B=$2 T=$3 p=$4 flags=${5:-} line
    if [ "$FLA_WARM" = 1 ]; then fla_train "$cfg" "$B" "$T" "$p" 1 "$flags" >/dev/null || true; fi
    line=$(fla_train "$cfg" "$B" "$T" "$p" $((STEPS - 3)) "$flags" | grep '^fla_train: .*tokens_per_s=' || true)
    if [ -z "$line" ]; then echo "gpu_speed: FLA $p: $(grep -v '^ *$' "$RUN_DIR/fla.err" | tail -1)" >&2; echo "failed"; return; fi
    echo "gpu_speed: $line" >&2
    rate_mem "$line"
}

# torch_linear_run CONFIG B T PRECISION MODE(eager|compile) -> "tokens/s mem_mib" or "failed": the PyTorch chunked
# model of CONFIG (bench/torch_linear_train.py)
torch_linear_run() {
    local cfg=$1 B=$2 T=$3 p=$4 mode=$5 line
    line=$("$SEQ" --config "$cfg" --set train.batch_size="$B" --set train.seq_len="$T" --print-config \
        | "$PY" bench/torch_linear_train.py --device cuda --precision "$p" --batch-size "$B" --seq-len "$T" --warmup 3 \
            --steps $((STEPS - 3)) $([ "$mode" = compile ] && echo --compile) 2>"$RUN_DIR/torch_linear.err" \
        | grep '^torch_linear_train: .*tokens_per_s=' || true)
    if [ -z "$line" ]; then
        echo "gpu_speed: PyTorch chunked $mode $p: $(grep -v '^ *$' "$RUN_DIR/torch_linear.err" | tail -1)" >&2
        echo "failed"; return
    fi
    echo "gpu_speed: $line" >&2
    rate_mem "$line"
}

# linear_refs: the PyTorch chunked references of the linear rows, one for each mode in TORCH (compile first)
linear_refs() {
    [[ " $TORCH " == *" compile "* ]] && echo -n "linear-compile "
    [[ " $TORCH " == *" eager "* ]] && echo -n "linear-eager"
    echo
}

ratio() { "$PY" -c "import sys; a, b = sys.argv[1], sys.argv[2]; print(f'{float(a) / float(b):.2f}x' if a.replace('.', '').isdigit() and b.replace('.', '').isdigit() else '-')" "$1" "$2"; }

TABLE="$RUN_DIR/table.md"
{
    echo "| model | B x T | precision | seqtrain tok/s | seqtrain MiB | reference | tok/s | MiB | seqtrain / reference |"
    echo "|---|---|---|---|---|---|---|---|---|"
} >"$TABLE"
for row in $ROWS; do
    read -r cfg B T < <(row_of "$row")
    for p in $PRECISIONS; do
        echo "gpu_speed: $row $p ..."
        read -r s_tps s_mem < <(seqtrain_run "$row" "$cfg" "$B" "$T" "$p"; echo)
        "$SEQ" --config "$cfg" --info 2>/dev/null | grep -m1 -i 'parameters' | sed "s/^/gpu_speed: seqtrain $row: /" >&2 || true
        refs=$TORCH
        case $row in
            gla*sr) refs="fla";;
            gdn*sr) refs="fla fla-unguarded";;
            gla*) refs="fla $(linear_refs)";;
            gdn*) refs="fla fla-unguarded $(linear_refs)";;
        esac
        fla_name=FLA
        [[ $row == *sr ]] && fla_name="Selective RoPE authors (FLA + SelectiveRoPE, $SELROPE_BACKEND)"
        for ref in $refs; do
            case $ref in
                fla) read -r r_tps r_mem < <(fla_run "$cfg" "$B" "$T" "$p"; echo); name=$fla_name;;
                fla-unguarded) read -r r_tps r_mem < <(fla_run "$cfg" "$B" "$T" "$p" --bypass-hopper-guard; echo)
                    name="$fla_name, Hopper guard bypassed (speed only)";;
                eager) read -r r_tps r_mem < <(torch_run "$cfg" "$B" "$T" "$p" eager; echo); name="PyTorch eager";;
                compile) read -r r_tps r_mem < <(torch_run "$cfg" "$B" "$T" "$p" compile; echo); name="torch.compile";;
                linear-eager) read -r r_tps r_mem < <(torch_linear_run "$cfg" "$B" "$T" "$p" eager; echo)
                    name="PyTorch chunked (eager)";;
                linear-compile) read -r r_tps r_mem < <(torch_linear_run "$cfg" "$B" "$T" "$p" compile; echo)
                    name="PyTorch chunked (torch.compile)";;
            esac
            line="| $row | $B x $T | $p | ${s_tps:--} | ${s_mem:--} | $name | ${r_tps:--} | ${r_mem:--} | $(ratio "${s_tps:--}" "${r_tps:--}") |"
            echo "gpu_speed: $line"
            echo "$line" >>"$TABLE"
        done
    done
done
echo
cat "$TABLE"
