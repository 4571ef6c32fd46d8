#!/usr/bin/env bash
# clang with libFuzzer, AddressSanitizer and UBSan for the native fuzz target (make fuzz-tools):
# Debian's clang-14 + libclang-rt-14-dev, installed when missing (as root), else a one-line hint.
set -euo pipefail
cc=${1:-clang-14}
if command -v "$cc" >/dev/null && test -f "$("$cc" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-x86_64.a"; then
  echo "$cc with libFuzzer: present"; exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-14 libclang-rt-14-dev
  exit 0
fi
echo "make fuzz-tools: $cc with libFuzzer/ASan/UBSan is missing: run as root: apt-get install clang-14 libclang-rt-14-dev" >&2
exit 1
