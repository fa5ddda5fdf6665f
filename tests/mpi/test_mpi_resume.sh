#!/usr/bin/env bash
# Every mixer under two MPI ranks (make MPI=1), a tiny model of each for 6 steps:
#   - --stop-after 3 and --resume with the same ranks give the uninterrupted 2-rank run's losses bit for bit,
#     and the same final checkpoint byte for byte;
#   - the 2-rank losses equal one process's to 1e-6 relative (only the order of the gradient sums differs).
# The mixers are the build's own list (seqtrain's unknown-kind message), so a new mixer is tested here without
# an edit; attention also runs with PaTH's positions (path, path_fox), whose tensors are no multiples of the
# parameter buffer's 16-float alignment. Both checks fail when any tensor's gradient is left out of the
# ranks' sum: each rank then trains its own copy of that tensor, and a resume restarts both from rank 0's.
#   MPI_BIN=build/release-mpi/bin bash tests/mpi/test_mpi_resume.sh     (run from the repository root)
set -u
MPI_BIN=$(cd "${MPI_BIN:-build/release-mpi/bin}" && pwd)
source tests/lib.sh || exit 2
test_scratch mpi-resume
# root may start MPI jobs here (CI runs as root); one thread per rank; no hang ever: 120 s at most a job
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPIRUN=(timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2)
losses() { python3 -c 'import json,sys; print(*[repr(d["loss"]) for d in map(json.loads, open(sys.argv[1])) if "loss" in d])' "$1"; }

wiki_shard "$MPI_BIN" 600
cat > "$W/base.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 5, "threads": 1},
  "data": {"train": "$W/train.shard"},
  "model": {"d_model": 32, "n_layers": 2, "mixer": {"kind": "attention"}},
  "train": {"batch_size": 2, "seq_len": 32, "grad_accum": 2, "steps": 6, "eval_every": 0, "ckpt_every": 0},
  "optim": {"lr": 3e-3, "weight_decay": 0.1},
  "schedule": {"kind": "cosine", "warmup_steps": 2}
}
JSON

mixers=$(mixer_kinds "$MPI_BIN" "$W/base.json")
[ -n "$mixers" ] || not_ok "the list of mixers" "seqtrain's unknown-kind message did not list them"
cases=""
for m in $mixers; do
    cases="$cases $m"
    [ "$m" = attention ] && cases="$cases attention:path attention:path_fox"
done
for c in $cases; do
    m=${c%%:*}; set=(--set model.mixer.kind="$m")
    [ "$c" != "$m" ] && set+=(--set model.mixer.pos="${c#*:}")
    n=${c//:/-}
    # the uninterrupted run beside the interrupted one (each tiny: mostly MPI's start-up, which overlaps)
    "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --config "$W/base.json" --quiet "${set[@]}" --set run.name="$n-full" \
        >"$W/full.out" 2>"$W/full.err" &
    full_job=$!
    run "$MPI_BIN/seqtrain" --config "$W/base.json" --quiet "${set[@]}" --set run.name="$n-one"
    r1=$RC
    run "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --config "$W/base.json" --quiet "${set[@]}" --set run.name="$n-res" \
        --stop-after 3
    r3=$RC
    [ "$r3" = 130 ] && run "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --resume "$W/runs/$n-res" --quiet
    r4=$RC
    wait "$full_job"
    r2=$?
    [ "$r2" = 0 ] || cp "$W/full.err" "$W/err"
    if [ "$r1 $r2 $r3 $r4" != "0 0 130 0" ]; then
        not_ok "$c: one process, 2 ranks, 2 ranks stopped after 3 steps and resumed" \
            "exit statuses $r1 $r2 $r3 $r4, expected 0 0 130 0: $(show "$W/err")"
        continue
    fi
    full=$(losses "$W/runs/$n-full/log.jsonl"); res=$(losses "$W/runs/$n-res/log.jsonl")
    DETAIL="uninterrupted: $full; resumed: $res"
    check "$c: 2 ranks resumed after step 3 give the uninterrupted run's 6 losses bit for bit" \
        test "$full" = "$res" -a "$(echo $full | wc -w)" = 6
    check "$c: ...and its final checkpoint byte for byte" \
        cmp "$W/runs/$n-full/ckpt-00000006/model.safetensors" "$W/runs/$n-res/ckpt-00000006/model.safetensors"
    d=$(python3 -c 'import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]
print(max(abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in zip(a, b)) if len(a) == len(b) == 6 else 1)' \
        "$(losses "$W/runs/$n-one/log.jsonl")" "$full")
    DETAIL="largest relative difference $d"
    check "$c: 2 ranks' losses equal one process's to 1e-6 relative ($d)" \
        python3 -c 'import sys; sys.exit(float(sys.argv[1]) > 1e-6)' "$d"
done
test_done
