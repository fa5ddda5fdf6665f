#!/usr/bin/env bash
# Installs the Debian packages seqtrain needs when they are missing. Called by ./setup (which a fresh
# Debian 12 needs first: it has no make) and by the Makefile on first build; safe to run again (it only
# installs what `dpkg -s` does not find). Needs only bash, dpkg and apt-get, never make.
set -euo pipefail
# gnuplot-nox (gnuplot without X) draws the figures of scripts/plot_rfa.sh; python3-numpy is what the
# --probe recipe of docs/training.md and the numpy side of scripts/safetensors_read.py use
need=(gcc g++ make python3 python3-numpy libcjson-dev libzstd-dev zstd libsentencepiece-dev sentencepiece gnuplot-nox)
# packages named as arguments are installed instead (`make fuzz` asks for clang and libFuzzer's runtime)
if [ $# -gt 0 ]; then need=("$@"); fi
missing=()
for p in "${need[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "install_deps: installing missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "install_deps: need root to install ${missing[*]}; run: apt-get install ${missing[*]}" >&2
        exit 1
    fi
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
