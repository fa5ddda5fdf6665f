# Shared by the bench scripts (sourced, not run):
#   bench_setup NAME WHAT...   brings bin/ and the benches up to date with the sources (make; nothing to do when
#                              they are, so an edited tree is never timed with its old binaries), prepares the
#                              WikiText-2 shards if absent, then prints "NAME: <CPU model>, nproc N, load average ..."
#                              and "NAME: commit <hash>[ with uncommitted changes], WHAT..."
#   kernels_of FILE            the kernel set a seqtrain/seqeval output FILE names ("... 2 threads, avx2 kernels")
#   torch_run LIB CORETYPE ALLOC ARGS...
#                              bench/torch_train.py with $TORCH_MODEL ARGS on $THREADS threads, with only this BLAS
#                              library path, OPENBLAS_CORETYPE and allocator setting (VAR=value) in its environment
#                              (and AVX2_ONLY's limits); prints its result line, or nothing when it crashed (the
#                              caller skips that probe)
#   peak_of MATMUL_OUTPUT      the fp32 peak (GFLOP/s) bench/matmul printed: of the widest vectors, or of 256-bit
#                              ones under AVX2_ONLY
#   tps_of                     the tokens_per_s value of a result line on stdin
#   pair_medians I/J...        stdin: one line of numbers per alternating pair; prints the median of each column,
#                              then the median over the pairs of each ratio column I / column J (0-based)
#   faster A B                 true when tokens/s A > B
#   blas_candidates BUILD...   sets candidates to the BLAS settings to probe, "LD_LIBRARY_PATH|OPENBLAS_CORETYPE"
#                              each (an empty path: the system's libblas.so.3): the system BLAS, then each OpenBLAS
#                              build named (openblas-openmp, ...) that is installed under $LIBDIR, with OpenBLAS's own
#                              core type, its AVX2 one ($AVX2_CORETYPE) and, on an AVX-512 CPU, SkylakeX (elsewhere
#                              those kernels die of an illegal instruction); under AVX2_ONLY the AVX2 one only
#   GLIBC_NO_MMAP              the allocator setting that keeps glibc from returning freed tensors to the kernel
#   torch_python               sets PY to a Python that imports torch: $PY if the caller set it (checked), else
#                              Debian's /usr/bin/python3 (python3-torch), else the python3 on PATH (a venv or
#                              pip install); exits with what to install when none does, or when that PyTorch
#                              would multiply on the reference BLAS (torch_blas_check)
#
# AVX2_ONLY=1 makes an AVX-512 CPU stand in for an AVX2-only one (none may be at hand): seqtrain/seqeval run
# their avx2 kernels (SEQ_KERNELS=avx2), PyTorch is held to AVX2 as well (ATEN_CPU_CAPABILITY=avx2 for its own
# kernels, MKL_ENABLE_INSTRUCTIONS=AVX2 for MKL, OPENBLAS_CORETYPE the core OpenBLAS picks on an AVX2 CPU of
# this vendor: Zen on AMD, Haswell on Intel), and the speed of light uses the peak of 256-bit FMAs. Closest to
# a real AVX2 CPU on one whose AVX-512 runs on 256-bit units (AMD Zen 4): there both peaks are the same.
#
# AVX2_CORETYPE: OpenBLAS's AVX2 kernels for this vendor (also one of train_speed.sh's probes: on an AVX-512
# CPU, OpenBLAS's own pick, e.g. Cooperlake on Zen 4, is not always its fastest)
if grep -q AuthenticAMD /proc/cpuinfo; then AVX2_CORETYPE=Zen; else AVX2_CORETYPE=Haswell; fi
AVX2_NOTE=""  # appended to what a script prints of PyTorch's setting
if [ "${AVX2_ONLY:-0}" = 1 ]; then export SEQ_KERNELS=avx2 AVX2_NOTE=", AVX2 only"; fi

bench_setup() {
    local name=$1; shift
    make -s -j"$(nproc)" tools benches >&2 || { echo "$name: make tools benches failed" >&2; exit 1; }
    [ -f build/data/wikitext2/train.shard ] || make data
    echo "$name: $(lscpu | sed -n 's/^Model name: *//p'), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    local rev
    rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    # the numbers belong to the tree as it is: say so when it is not the commit
    if [ "$rev" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        rev="$rev with uncommitted changes"
    fi
    echo "$name: commit $rev, $*"
}

kernels_of() { sed -n 's/.* \([a-z0-9]*\) kernels$/\1/p' "$1" | head -n 1; }

torch_run() {
    local lib=$1 ct=$2 alloc=$3 limits=(); shift 3
    if [ "${AVX2_ONLY:-0}" = 1 ]; then
        ct=$AVX2_CORETYPE
        limits=(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2)
    fi
    env -u OPENBLAS_CORETYPE -u LD_LIBRARY_PATH -u LD_PRELOAD -u GLIBC_TUNABLES -u ATEN_CPU_CAPABILITY \
        -u MKL_ENABLE_INSTRUCTIONS ${lib:+LD_LIBRARY_PATH=$lib} ${ct:+OPENBLAS_CORETYPE=$ct} ${alloc:+"$alloc"} \
        ${limits[@]+"${limits[@]}"} \
        OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
        "$PY" bench/torch_train.py --threads "$THREADS" $TORCH_MODEL "$@" 2>/dev/null \
        | grep '^torch_train: .*tokens_per_s=' || true
}

peak_of() {
    local all avx2
    all=$(echo "$1" | sed -n 's/.*measured fp32 FMA peak \([0-9.]*\) GFLOP\/s.*/\1/p')
    avx2=$(echo "$1" | sed -n 's/^peak with avx2 vectors: \([0-9.]*\) GFLOP\/s.*/\1/p')
    if [ "${AVX2_ONLY:-0}" = 1 ] && [ -n "$avx2" ]; then echo "$avx2"; else echo "$all"; fi
}

tps_of() { sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'; }

pair_medians() {
    "$PY" -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
ratios = [tuple(map(int, a.split("/"))) for a in sys.argv[1:]]
cols = [statistics.median(r[c] for r in rows) for c in range(len(rows[0]))]
print(*cols, *(statistics.median(r[i] / r[j] for r in rows) for i, j in ratios))' "$@"
}

faster() { "$PY" -c "import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))" "$1" "$2"; }

blas_candidates() {
    local lib
    if [ "${AVX2_ONLY:-0}" = 1 ]; then candidates=("|$AVX2_CORETYPE"); else candidates=("|"); fi
    for lib in "$@"; do
        [ -f "$LIBDIR/$lib/libblas.so.3" ] || continue
        if [ "${AVX2_ONLY:-0}" = 1 ]; then candidates+=("$LIBDIR/$lib|$AVX2_CORETYPE"); continue; fi
        candidates+=("$LIBDIR/$lib|" "$LIBDIR/$lib|$AVX2_CORETYPE")
        if grep -qw avx512f /proc/cpuinfo; then candidates+=("$LIBDIR/$lib|SkylakeX"); fi
    done
}

GLIBC_NO_MMAP="GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295"

# a PyTorch built on the system BLAS (Debian's: BLAS_INFO=generic) with only the reference BLAS installed
# (netlib's, what python3-torch pulls in by default) multiplies an order of magnitude slower than with
# OpenBLAS: a ratio against it says nothing, so stop and say what to install (the probes then try each
# OpenBLAS build)
torch_blas_check() {
    "$PY" -c 'import sys, torch; sys.exit("BLAS_INFO=generic" not in torch.__config__.show())' 2>/dev/null || return 0
    local d
    for d in "$LIBDIR"/openblas*/ "$LIBDIR"/blis*/ "$LIBDIR"/atlas/; do
        [ -f "$d/libblas.so.3" ] && return 0
    done
    case "$(readlink -f "$LIBDIR/libblas.so.3" 2>/dev/null)" in
        "$LIBDIR"/blas/*|"") ;;
        *) return 0 ;;
    esac
    echo "error: $PY's PyTorch multiplies with the system BLAS, and the only one here is the reference BLAS" >&2
    echo "       ($(readlink -f "$LIBDIR/libblas.so.3" 2>/dev/null || echo "no $LIBDIR/libblas.so.3"), unoptimised): its times would make any ratio meaningless." >&2
    echo "       Install OpenBLAS (apt-get install libopenblas0-openmp libopenblas0-pthread); the script then probes both builds." >&2
    exit 1
}

torch_python() {
    local c
    for c in ${PY:-/usr/bin/python3 python3}; do
        if "$c" -c 'import torch' >/dev/null 2>&1; then PY=$c; torch_blas_check; return 0; fi
    done
    echo "error: ${PY:+PY=$PY: }no Python here imports torch (tried ${PY:-/usr/bin/python3 and python3 on PATH})." >&2
    echo "       Install Debian's PyTorch (apt-get install python3-torch), or point PY at a Python that has it" >&2
    echo "       (e.g. PY=/opt/venv/bin/python3 bash $0)." >&2
    exit 1
}
