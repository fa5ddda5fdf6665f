#!/usr/bin/env bash
# Two builds compared bit for bit: the same tiny training runs with the tools of OLD_BINDIR and of NEW_BINDIR
# must leave the same bytes, for a change that must not change behaviour (moving code, a refactoring, a build
# change). Each run trains a tiny model (d_model 32, 2 layers) for 8 steps (batch 2, seq_len 32, 2 threads, a fixed
# seed) with a checkpoint at step 4 and validation at steps 4 and 8, then seqeval evaluates it. Compared:
#   - the run directory: the list of its files; log.jsonl, every checkpoint's state.json and every other JSON
#     file without the wall-clock fields (TIMING below: the only fields that differ between two runs of one
#     binary); every other file byte for byte (cmp): config.json, latest, each checkpoint's model.safetensors
#     and optim.safetensors, the final eval/ tables;
#   - the exit status of every command, and the output of seqtrain (--quiet) and of seqtrain --info;
#   - seqeval: --data valid --context 32,64 (its output and every table it writes), --generate (greedy for 40
#     tokens, past the slide of a full cache, and a sampled batch of two prompts), --task for task runs;
#   - seqtok: encode's shards, decode's text, info's report.
# A run is bit-identical only for the same kind of CPU, thread count and kernel set (docs/training.md,
# Determinism), so both builds run here with the same ones: the kernel set is auto (the best this CPU has)
# unless a run names another.
# The runs (CPU): attention with each position scheme (rope, none, alibi, fox, decayed_rope, sc_rope with
# qk_norm, a window and the interleaved layout, path, path_fox, selective_rope); every other mixer the old build
# has (tests/lib.sh's mixer_kinds), each with small chunks so the chunked engines cross chunk boundaries, and
# variants (rfa spectral coupling, kla with mc_samples 2, linear_attn's rotate, gla and gated_deltanet with
# selective_rope); a 3-layer hybrid (mamba2, attention, kla through model.layers; rmsnorm, swiglu, untied head,
# wsd schedule) under each kernel set of this CPU; grad_accum 2 with optimizer groups and onecycle; a run stopped
# after 5 steps (--stop-after) and resumed, and the old build's stopped run resumed by each build (the new build
# reads the old one's checkpoints); task runs (mqar, and compression with the autoencoder head).
# With OLD_GPU_BINDIR NEW_GPU_BINDIR, seqtrain and seqeval of the GPU backend (the emulated one, make
# build/release/tests-gpuemu/seqtrain build/release/tests-gpuemu/seqeval; or make CUDA=1's build/cuda/bin on a
# machine with a GPU): attention runs with run.device cuda at fp32, tf32 and bf16, a bf16 run stopped and
# resumed, grad_accum 2 with groups and fox, and an mqar run, evaluated by seqeval on the GPU.
# A developer tool, not part of make test: about 20 s on 2 cores, and a minute more for the emulated GPU runs:
#   bash tests/compare_runs.sh OLD_BINDIR NEW_BINDIR [OLD_GPU_BINDIR NEW_GPU_BINDIR]   (from the repository root)
#   ONLY=REGEX compares only the runs whose names match; KEEP=1 keeps the scratch directory (old/ and new/, each
#   with runs/, ev/ (seqeval's tables) and out/ (outputs and exit statuses)).
set -u
usage() { echo "usage: bash tests/compare_runs.sh OLD_BINDIR NEW_BINDIR [OLD_GPU_BINDIR NEW_GPU_BINDIR]" >&2; exit 2; }
[ $# = 2 ] || [ $# = 4 ] || usage
[ -f tests/lib.sh ] || { echo "compare_runs.sh: run it from the repository root" >&2; exit 2; }
ROOT=$(pwd)
declare -A BIN GBIN
tooldir() {  # tooldir DIR TOOL...: DIR as an absolute path, when it holds every TOOL
    local d t
    d=$(cd "$1" 2>/dev/null && pwd) || { echo "compare_runs.sh: no directory $1" >&2; return 1; }
    shift
    for t in "$@"; do [ -x "$d/$t" ] || { echo "compare_runs.sh: $d/$t not found" >&2; return 1; }; done
    echo "$d"
}
BIN[old]=$(tooldir "$1" seqtrain seqeval seqtok) || exit 2
BIN[new]=$(tooldir "$2" seqtrain seqeval seqtok) || exit 2
if [ $# = 4 ]; then
    GBIN[old]=$(tooldir "$3" seqtrain seqeval) || exit 2
    GBIN[new]=$(tooldir "$4" seqtrain seqeval) || exit 2
fi
export OMP_NUM_THREADS=2
# idle threads sleep rather than spin: the same results (the thread count fixes them), and runs this small stay
# fast when other work shares the cores (spinning, they took ten times longer on a busy 2-core machine)
export OMP_WAIT_POLICY=passive
unset SEQ_PROFILE
source tests/lib.sh || exit 2
test_scratch compare
[ -n "${KEEP:-}" ] && echo "# scratch directory $W" >&2
ONLY=${ONLY:-}
TIMING="tokens_per_s|elapsed_s|allreduce_s|gpu_mem_mib"
TOK="$ROOT/data/tokenizer/wikitext2_bpe8192.model"
mkdir -p "$W"/{old,new}/{runs,ev,out}

# --- data: WikiText-2 validation lines to train on, test lines to validate on, tokenised by the old build
wiki_shard "${BIN[old]}" 400
zstd -dc data/wikitext-2/wiki.test.tokens.zst | head -n 150 > "$W/val.txt"
"${BIN[old]}/seqtok" encode --quiet --model "$TOK" --input "$W/val.txt" --output "$W/val.shard" > /dev/null
printf 'The game\nIn 1990 , the\n' > "$W/prompts.txt"

# the runs' configurations; run.dir is relative (each build runs in its own directory, $W/old or $W/new) so that
# config.json and state.json are the same for both
cat > "$W/lm.json" <<JSON
{
  "run": {"dir": "runs", "seed": 7, "threads": 2},
  "data": {"train": "$W/train.shard", "val": "$W/val.shard", "test": "$W/val.shard", "tokenizer": "$TOK"},
  "model": {"d_model": 32, "n_layers": 2, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"batch_size": 2, "seq_len": 32, "steps": 8, "eval_every": 4, "eval_batches": 2, "ckpt_every": 4, "keep_last": 3},
  "optim": {"lr": 3e-3, "weight_decay": 0.1},
  "schedule": {"kind": "cosine", "warmup_steps": 2, "min_lr_frac": 0.1},
  "eval": {"contexts": "32,64", "split": "test", "max_windows": 4}
}
JSON
cat > "$W/task.json" <<JSON
{
  "run": {"dir": "runs", "seed": 3, "threads": 2},
  "data": {"task": {"kind": "mqar", "vocab": 128, "num_kv_pairs": 4, "train_examples": 500, "test_examples": 16}},
  "model": {"d_model": 32, "n_layers": 2, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"batch_size": 4, "seq_len": 32, "steps": 8, "eval_every": 4, "ckpt_every": 4},
  "optim": {"lr": 3e-3},
  "schedule": {"kind": "cosine", "warmup_steps": 2}
}
JSON
# optimizer groups (first match wins), grad_accum 2 and onecycle with cycled momentum, as --set arguments
ACCUM=(--set train.grad_accum=2 --set 'optim.groups=[{"match": "*.ln*", "lr_mult": 0.5},
    {"match": "blocks.*.mixer.*", "weight_decay": 0.01, "beta2": 0.99, "clip": 0.5}]'
    --set 'schedule={"kind": "onecycle", "pct_start": 0.25, "cycle_momentum": true}')

# --- comparing
untimed() { sed -E 's/"('"$TIMING"')":[[:space:]]*[^,}]*//g' "$1"; }
# same_file OLD NEW: the same bytes (JSON: without the timing fields); prints where they first differ
same_file() {
    local r
    case $1 in
        *.json|*.jsonl) r=$(cmp <(untimed "$1") <(untimed "$2") 2>&1) ;;
        *) r=$(cmp "$1" "$2" 2>&1) ;;
    esac && return 0
    case $r in
        *EOF*) echo "one ends early"; return 1 ;;
    esac
    case $1 in
        *.safetensors) r=${r##*: }; echo "${r%%, line*}" ;;  # "byte N"
        *) echo "${r##*, }" ;;                               # "line N"
    esac
    return 1
}
# compare NAME: "ok - NAME" when the old and the new build left the same, else "not ok" naming what differed
compare() {
    local n=$1 O="$W/old" N="$W/new" d=() files=0 f where bad
    # the old build must have run (an unchanged failure would pass unnoticed): every status 0, a --stop-after 130;
    # seqeval --generate may fail (a mixer that cannot decode), the same way in both
    bad=$(awk '$2 != 0 && !($1 == "stop" && $2 == 130) && $1 != "greedy" && $1 != "sampled" { print $1 }' "$O/out/$n.rc" | head -1)
    if [ -n "$bad" ]; then
        not_ok "$n" "the old build's $bad failed: $(grep -h . "$O/out/$n".* 2>/dev/null | grep -m1 'error' || echo '?')"
        return
    fi
    cmp -s "$O/out/$n.rc" "$N/out/$n.rc" || d+=("exit statuses: old $(paste -sd, "$O/out/$n.rc"), new $(paste -sd, "$N/out/$n.rc")")
    local dir
    for dir in "runs/$n" "ev/$n"; do
        [ -d "$O/$dir" ] || [ -d "$N/$dir" ] || continue
        if [ "$(cd "$O/$dir" 2>/dev/null && find . -type f | sort)" != "$(cd "$N/$dir" 2>/dev/null && find . -type f | sort)" ]; then
            d+=("the files of $dir: $(diff <(cd "$O/$dir" 2>/dev/null && find . -type f | sort) \
                <(cd "$N/$dir" 2>/dev/null && find . -type f | sort) | grep '^[<>]' | sed 's/^< \.\//old only: /; s/^> \.\//new only: /' | head -3 | paste -sd,)")
        fi
        # config.json and log.jsonl first: they show where the two runs part
        for f in $(cd "$O/$dir" 2>/dev/null && find . -type f | sort | sed 's|^\./||' |
                   awk '{ print ($0 == "config.json" ? 0 : $0 == "log.jsonl" ? 1 : 2) " " $0 }' | sort -s -k1,1n | cut -d' ' -f2); do
            [ -f "$N/$dir/$f" ] || continue
            files=$((files + 1))
            where=$(same_file "$O/$dir/$f" "$N/$dir/$f") || d+=("$dir/$f ($where)")
        done
    done
    for f in "$O/out/$n".*; do
        case $f in *.rc|*.err) continue ;; esac
        files=$((files + 1))
        where=$(same_file "$f" "$N/out/${f##*/}") || d+=("${f##*/} ($where)")
    done
    if [ ${#d[@]} = 0 ]; then
        ok "$n [$files files and outputs]"
    else
        local more=""
        [ ${#d[@]} -gt 4 ] && more="; and $((${#d[@]} - 4)) more"
        not_ok "$n" "$(printf '%s; ' "${d[@]:0:4}" | sed 's/; $//')$more"
    fi
}

# --- running
# run_side SIDE NAME MODE CONFIG ARGS...: one build's run NAME and its evaluations, in $W/SIDE; outputs and exit
# statuses in $W/SIDE/out/NAME.*. MODE: words of lm (seqeval perplexity and --generate), task (seqeval --task),
# resume (--stop-after 5, then --resume; the old build's stopped run is kept in $W/stopped-NAME), gpu (the GPU
# build's tools; seqeval perplexity only)
run_side() {
    local s=$1 n=$2 mode=$3 cfg=$4; shift 4
    local b=${BIN[$s]} o="out/$n"
    [[ $mode == *gpu* ]] && b=${GBIN[$s]}
    cd "$W/$s" || return
    : > "$o.rc"
    "$b/seqtrain" --config "$cfg" --set run.name="$n" "$@" --info > "$o.info" 2>&1; echo "info $?" >> "$o.rc"
    if [[ $mode == *resume* ]]; then
        "$b/seqtrain" --config "$cfg" --set run.name="$n" "$@" --quiet --stop-after 5 > "$o.train" 2>&1
        echo "stop $?" >> "$o.rc"
        if [ "$s" = old ]; then rm -rf "$W/stopped-$n"; cp -r "runs/$n" "$W/stopped-$n"; fi
        "$b/seqtrain" --resume "runs/$n" --quiet >> "$o.train" 2>&1; echo "resume $?" >> "$o.rc"
    else
        "$b/seqtrain" --config "$cfg" --set run.name="$n" "$@" --quiet > "$o.train" 2>&1; echo "train $?" >> "$o.rc"
    fi
    eval_side "$s" "$b" "$n" "$mode"
    cd "$ROOT" || return
}
eval_side() {  # eval_side SIDE BINDIR NAME MODE (in $W/SIDE)
    local s=$1 b=$2 n=$3 mode=$4 o="out/$3"
    if [[ $mode == *task* ]]; then
        "$b/seqeval" --run "runs/$n" --task > "$o.task" 2> "$o.task.err"; echo "task $?" >> "$o.rc"
        return
    fi
    "$b/seqeval" --run "runs/$n" --data valid --context 32,64 --max-windows 4 --out "ev/$n" > "$o.ppl" 2> "$o.ppl.err"
    echo "ppl $?" >> "$o.rc"
    [[ $mode == *gpu* ]] && return
    "$b/seqeval" --run "runs/$n" --generate --prompt "The game" --max-new 40 --temperature 0 \
        > "$o.greedy" 2> "$o.greedy.err"
    echo "greedy $?" >> "$o.rc"
    "$b/seqeval" --run "runs/$n" --generate --prompt-file "$W/prompts.txt" --max-new 16 --seed 3 \
        > "$o.sampled" 2> "$o.sampled.err"
    echo "sampled $?" >> "$o.rc"
}
# pair NAME MODE CONFIG ARGS...: run NAME with the old build, then the new one, and compare (KSET: the kernel set)
pair() {
    [ -z "$ONLY" ] || [[ $1 =~ $ONLY ]] || return 0
    SEQ_KERNELS=${KSET:-auto} run_side old "$@"
    SEQ_KERNELS=${KSET:-auto} run_side new "$@"
    compare "$1"
}
# resumed NAME: the old build's run NAME as it stopped, resumed by each build, as run NAME-x
resumed() {
    [ -d "$W/stopped-$1" ] || return 0
    local s n="$1-x"
    for s in old new; do
        cd "$W/$s" || return
        rm -rf "runs/$n"; cp -r "$W/stopped-$1" "runs/$n"
        "${BIN[$s]}/seqtrain" --resume "runs/$n" --quiet > "out/$n.train" 2>&1; echo "resume $?" > "out/$n.rc"
        eval_side "$s" "${BIN[$s]}" "$n" lm
        cd "$ROOT" || return
    done
    compare "$n"
}

# --- seqtok
if [ -z "$ONLY" ] || [[ seqtok =~ $ONLY ]]; then
    for s in old new; do
        o="$W/$s/out"
        "${BIN[$s]}/seqtok" encode --quiet --model "$TOK" --input "$W/train.txt" --output "$o/seqtok.shard" > /dev/null
        echo "encode $?" > "$o/seqtok.rc"
        "${BIN[$s]}/seqtok" decode --model "$TOK" --input "$o/seqtok.shard" --start 1000 --count 500 > "$o/seqtok.decode"
        echo "decode $?" >> "$o/seqtok.rc"
        (cd "$o" && "${BIN[$s]}/seqtok" info --verify seqtok.shard) > "$o/seqtok.info"; echo "info $?" >> "$o/seqtok.rc"
    done
    compare seqtok
fi

# --- CPU runs
LM="$W/lm.json"
KINDS=$(cd "$W/old" && mixer_kinds "${BIN[old]}" "$LM")
NEW_KINDS=$(cd "$W/new" && mixer_kinds "${BIN[new]}" "$LM")
if [ -n "$KINDS" ] && [ "$KINDS" = "$NEW_KINDS" ]; then
    ok "the same mixers: $KINDS"
else
    not_ok "the same mixers" "old: ${KINDS:-none found}; new: ${NEW_KINDS:-none found}"
fi
pair attn-rope lm "$LM"
pair attn-nope lm "$LM" --set model.mixer.pos=none
pair attn-alibi lm "$LM" --set model.mixer.pos=alibi
pair attn-fox lm "$LM" --set model.mixer.pos=fox --set model.mixer.bias=true
pair attn-decayed_rope lm "$LM" --set model.mixer.pos=decayed_rope --set model.mixer.zero_decay_heads=1
pair attn-sc_rope lm "$LM" --set model.mixer.pos=sc_rope --set model.mixer.decay_mode=logits \
    --set model.mixer.rope_layout=interleaved --set model.mixer.qk_norm=true --set model.mixer.window=16
pair attn-path lm "$LM" --set model.mixer.pos=path --set model.mixer.path_chunk=16
pair attn-path_fox lm "$LM" --set model.mixer.pos=path_fox --set model.mixer.path_rank=0 --set model.mixer.path_chunk=16
pair attn-selrope lm "$LM" --set model.mixer.pos=fox \
    --set 'model.mixer.selective_rope={"enabled": true, "use_gate": true, "use_bias": true}'
# every other mixer, its chunks (where it has them) half a sequence
for k in $KINDS; do
    case $k in
        attention) continue ;;
        rfa) spec='{"kind": "rfa", "heads": 2}' ;;
        kla) spec='{"kind": "kla", "d_state": 8, "chunk": 16}' ;;
        mamba2) spec='{"kind": "mamba2", "d_state": 16, "head_dim": 16, "chunk": 16}' ;;
        gsa) spec='{"kind": "gsa", "heads": 2, "num_slots": 8, "chunk": 16}' ;;
        bla) spec='{"kind": "bla", "heads": 2, "modes": 8, "chunk": 16}' ;;
        linear_attn|retnet|gla|mlstm|deltanet|gated_deltanet) spec="{\"kind\": \"$k\", \"heads\": 2, \"chunk\": 16}" ;;
        *) spec="{\"kind\": \"$k\"}" ;;  # a mixer this script does not know yet: its defaults
    esac
    pair "$k" lm "$LM" --set "model.mixer=$spec"
    case $k in
        rfa) pair rfa-sc lm "$LM" --set "model.mixer=$spec" --set model.mixer.spectral_coupling=true ;;
        kla) pair kla-mc2 lm "$LM" --set "model.mixer=$spec" --set model.mc_samples=2 ;;
        linear_attn) pair linear_attn-rotate lm "$LM" --set "model.mixer=$spec" --set model.mixer.rotate=true ;;
        gla) pair gla-selrope lm "$LM" --set "model.mixer=$spec" --set 'model.mixer.selective_rope={"enabled": true,
            "full_rank": true, "temp_type": "rfa", "temp_theta": 0.5, "conv_act": "silu"}' ;;
        gated_deltanet) pair gated_deltanet-selrope lm "$LM" --set "model.mixer=$spec" \
            --set 'model.mixer.selective_rope={"enabled": true, "phi_proj_rank": 8, "skip_conv": true}' ;;
    esac
done
HYBRID=(--set model.n_layers=3 --set 'model.layers=[{"at": "0", "mixer": {"kind": "mamba2", "d_state": 16,
    "head_dim": 16, "chunk": 16}}, {"at": "-1", "mixer": {"kind": "kla", "d_state": 8, "sensors": "mamba"}}]'
    --set model.norm=rmsnorm --set 'model.mlp={"kind": "swiglu", "ratio": 2, "bias": false}'
    --set model.tie_embeddings=false --set model.head_bias=true --set 'schedule={"kind": "wsd", "warmup_steps": 2}')
pair hybrid lm "$LM" "${HYBRID[@]}"
for KSET in $(kernel_sets "${BIN[old]}" | tail -n +2); do pair "hybrid-$KSET" lm "$LM" "${HYBRID[@]}"; done
unset KSET
pair accum-groups lm "$LM" "${ACCUM[@]}"
pair resume "lm resume" "$LM"
resumed resume
pair task-mqar task "$W/task.json"
pair task-compression task "$W/task.json" --set 'data.task={"kind": "compression"}' --set model.head=autoencoder \
    --set 'model.mixer={"kind": "gla", "heads": 2, "chunk": 16}'

# --- GPU runs
if [ $# = 4 ]; then
    GPU=(--set run.device=cuda)
    pair gpu-fp32 "gpu lm" "$LM" "${GPU[@]}" --set run.precision=fp32
    pair gpu-tf32 "gpu lm" "$LM" "${GPU[@]}" --set run.precision=tf32
    pair gpu-bf16 "gpu lm" "$LM" "${GPU[@]}" --set run.precision=bf16
    pair gpu-bf16-resume "gpu lm resume" "$LM" "${GPU[@]}" --set run.precision=bf16
    pair gpu-accum-fox "gpu lm" "$LM" "${GPU[@]}" --set run.precision=fp32 "${ACCUM[@]}" \
        --set model.mixer.pos=fox --set model.mixer.bias=true
    pair gpu-task-mqar "gpu task" "$W/task.json" "${GPU[@]}" --set run.precision=fp32
fi
echo "# $SECONDS s" >&2
test_done
