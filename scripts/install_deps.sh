#!/usr/bin/env bash
# Installs the Debian packages seqtrain needs when they are missing. Called by the Makefile on first
# build; safe to run again (it only installs what `dpkg -s` does not find).
set -euo pipefail
# gnuplot-nox (gnuplot without X) draws the figures of scripts/plot_rfa.sh
need=(gcc g++ make python3 libcjson-dev libzstd-dev zstd libsentencepiece-dev sentencepiece gnuplot-nox)
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
