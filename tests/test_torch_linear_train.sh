#!/usr/bin/env bash
# bench/torch_linear_train.py, the PyTorch reference of bench/gpu_speed.sh's GLA and Gated DeltaNet rows, on the CPU:
#   - its --self-test on tiny configs made by seqtrain (d 32, 2 layers, chunk 16 at T 40, so the last chunk is
#     partial; GLA's sub-chunks of 4 and 8): the chunked mixers against scripts/torch_ref's float64 forms (forward
#     and every gradient to 1e-12 / 1e-10 relative in float64, 1e-4 in float32, strong decays included), the whole
#     model's parameter table and logits against torch_ref's, and a few AdamW steps that lower the loss; with
#     the options the speed configs leave at their defaults (short convs on GLA, no output gate, no conv and
#     allow_neg_eigval on Gated DeltaNet) as well
#   - its parameter count of bench/configs/speed_gla.json and speed_gdn.json against seqtrain --info's
#   - a few training steps on the CPU in fp32 and bf16: the result line, with a finite loss
#   - what it refuses: a mixer it has no form of, tf32 on the CPU, --compile on a torch without torch.compile
# Needs /usr/bin/python3 with python3-torch (skipped, saying so, without it).
#
#   BIN=bin bash tests/test_torch_linear_train.sh
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-bin}
PY=/usr/bin/python3
SCRIPT=bench/torch_linear_train.py
source tests/lib.sh || exit 2
if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "test_torch_linear_train.sh: skipped: $PY cannot import torch (apt-get install python3-torch)"
    exit 0
fi
test_scratch torch-linear
wiki_shard "$BIN" 200  # seqtrain --info needs data.train

# tiny NAME CONFIG SETTINGS...: $W/NAME.json, the resolved config of CONFIG at d 32, 2 layers, chunk 16
tiny() {
    local name=$1 cfg=$2; shift 2
    "$BIN/seqtrain" --config "$cfg" --set model.d_model=32 --set model.n_layers=2 --set model.mixer.chunk=16 "$@" \
        --print-config > "$W/$name.json"
}
# self_test NAME SUB: the self-test's ok / not ok lines as this test's, and a line of its own if it died
self_test() {
    local name=$1 sub=$2 line
    "$PY" "$SCRIPT" --self-test --seq-len 40 --sub-chunk "$sub" < "$W/$name.json" > "$W/st.out" 2> "$W/st.err"
    local rc=$?
    while IFS= read -r line; do
        case $line in
            "ok - "*) ok "$name: ${line#ok - }";;
            "not ok - "*) not_ok "$name: ${line#not ok - }" "see the line";;
        esac
    done < "$W/st.out"
    if [ "$rc" != 0 ] && ! grep -q '^not ok - ' "$W/st.out"; then
        not_ok "$name: self-test ran" "exit $rc: $(show "$W/st.err")"
    elif [ "$rc" = 0 ] && [ "$(grep -c '^ok - ' "$W/st.out")" != 7 ]; then
        not_ok "$name: 7 self-checks" "$(show "$W/st.out")"
    fi
}

tiny gla bench/configs/speed_gla.json
tiny gla_conv bench/configs/speed_gla.json --set model.mixer.conv=4 --set model.mixer.output_gate=false
tiny gdn bench/configs/speed_gdn.json
tiny gdn_neg bench/configs/speed_gdn.json --set model.mixer.allow_neg_eigval=true --set model.mixer.conv=0 \
    --set model.mixer.use_gate=false
self_test gla 4
self_test gla_conv 8
self_test gdn 4
self_test gdn_neg 4

# the benchmark models' parameter counts: seqtrain's and the reference's
for c in gla gdn; do
    cfg=bench/configs/speed_$c.json
    want=$("$BIN/seqtrain" --config "$cfg" --set data.train="$W/train.shard" --info 2>&1 |
           sed -n 's/^model  *\([0-9]*\) parameters.*/\1/p')
    got=$("$BIN/seqtrain" --config "$cfg" --print-config | "$PY" "$SCRIPT" --params |
          sed -n 's/.* params=\([0-9]*\)$/\1/p')
    echo "$cfg: seqtrain --info ${want:-?} parameters, $SCRIPT ${got:-?}"
    if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "$cfg: $got parameters, as seqtrain --info"; else
        not_ok "$cfg: parameter count" "seqtrain --info '$want', $SCRIPT '$got'"; fi
done

# training steps on the CPU: the result line with a finite loss
for c in gla gdn; do
    for p in fp32 bf16; do
        "$PY" "$SCRIPT" --device cpu --precision "$p" --batch-size 2 --seq-len 40 --vocab 256 --warmup 1 --steps 2 \
            < "$W/$c.json" > "$W/run.out" 2> "$W/run.err"
        re="^torch_linear_train: model=[a-z_]+ params=[0-9]+ device=cpu precision=$p compile=0 chunk=16"
        re="$re tokens_per_s=[0-9]+ peak_mem_mib=[0-9]+ loss=[0-9]+\.[0-9]+ "
        if grep -qE "$re" "$W/run.out"; then ok "$c $p: 3 steps on the CPU, $(grep -o 'loss=[0-9.]*' "$W/run.out")"
        else not_ok "$c $p: training on the CPU" "$(show "$W/run.out") $(show "$W/run.err")"; fi
    done
done

# refusals, each naming what to change
"$BIN/seqtrain" --config configs/quickstart.json --print-config > "$W/attn.json"
"$PY" "$SCRIPT" --device cpu < "$W/attn.json" > /dev/null 2> "$W/err"; rc=$?
if [ "$rc" != 0 ] && grep -q 'model.mixer.kind = "attention" has no reference here (allowed: gla' "$W/err"; then
    ok "an attention config is refused, naming model.mixer.kind"
else not_ok "attention refused" "rc $rc: $(show "$W/err")"; fi
"$PY" "$SCRIPT" --device cpu --precision tf32 < "$W/gla.json" > /dev/null 2> "$W/err"; rc=$?
if [ "$rc" != 0 ] && grep -q 'tf32 is a CUDA matmul mode' "$W/err"; then ok "tf32 on the CPU is refused"; else
    not_ok "tf32 on the CPU refused" "rc $rc: $(show "$W/err")"; fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)'; then
    "$PY" "$SCRIPT" --device cpu --compile < "$W/gla.json" > /dev/null 2> "$W/err"; rc=$?
    if [ "$rc" != 0 ] && grep -q -- '--compile needs torch >= 2.0 (this is ' "$W/err"; then
        ok "--compile on torch $("$PY" -c 'import torch; print(torch.__version__)') is refused, naming the version"
    else not_ok "--compile refused on torch < 2" "rc $rc: $(show "$W/err")"; fi
fi
test_done
