#!/usr/bin/env bash
# Installs the Debian packages ctitan needs. Idempotent: does nothing when all are present.
#   gcc/make          build
#   libdnnl-dev       oneDNN: sgemm / bf16 gemm (measured faster than Debian's OpenBLAS here)
#   libopenmpi-dev    MPI (headers, mpicc) ; openmpi-bin: mpirun
#   libpcre2-dev      PCRE2: Unicode regex for tiktoken pre-tokenisation
#   libutf8proc-dev   utf8proc: NFC, for tokenizer.json files whose normalizer is NFC (Qwen2/3)
#   zlib1g-dev        zlib: the CRC-32 of every checkpoint file; gzip corpora and Parquet GZIP pages
#   libzstd-dev       zstd: .zst corpora and Parquet ZSTD pages (data prepare)
#   libsnappy-dev     snappy: Parquet SNAPPY pages, pyarrow's default compression (data prepare)
#   fortunes          the default English training corpus (/usr/share/games/fortunes)
#   libxml2-utils     xmllint: tests check that the SVG of `ctitan plot` parses as XML
#   clang/libclang-rt-dev  libFuzzer + sanitizer runtimes for the fuzz targets (make fuzz, make test)
set -euo pipefail
pkgs=(build-essential libdnnl-dev libopenmpi-dev openmpi-bin libpcre2-dev libutf8proc-dev zlib1g-dev libzstd-dev libsnappy-dev fortunes fortunes-min libxml2-utils clang libclang-rt-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
