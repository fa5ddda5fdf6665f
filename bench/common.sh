# Shared by the bench scripts (sourced, not run): build what is missing and say where the numbers come from.
#   bench_setup NAME WHAT...   builds bin/ and the benches if absent, prepares the WikiText-2 shards if absent,
#                              then prints "NAME: <CPU model>, nproc N, load average ..." and
#                              "NAME: commit <hash>, WHAT..."
bench_setup() {
    local name=$1; shift
    [ -x bin/seqtrain ] || make -j"$(nproc)" tools
    [ -x build/release/bench/matmul ] || make -j"$(nproc)" benches
    [ -f build/data/wikitext2/train.shard ] || make data
    echo "$name: $(lscpu | sed -n 's/^Model name: *//p'), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "$name: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $*"
}
