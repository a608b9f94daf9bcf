#!/usr/bin/env bash
# Installs the dependencies, builds ferry and its tests, and runs every test with CTest.
#   scripts/test.sh              Release build in build-test/
#   scripts/test.sh --sanitize   address + undefined-behaviour sanitizer build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${FERRY_SKIP_DEPS:-0}" != 1 ]; then ./scripts/install-deps.sh; fi
./scripts/fetch-test-data.sh
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=ON -DFERRY_BENCH=OFF >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  dir=build-test
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$dir"
ctest --test-dir "$dir" --output-on-failure -j2
