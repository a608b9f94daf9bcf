#!/usr/bin/env bash
# Installs the dependencies, builds ferry and its tests, and runs every test with CTest.
#   scripts/test.sh              Release build in build-test/
#   scripts/test.sh --sanitize   address + undefined-behaviour sanitizer build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${FERRY_SKIP_DEPS:-0}" != 1 ]; then ./scripts/install-deps.sh; fi
./scripts/fetch-test-data.sh
# The set-up installs Vulkan (lavapipe runs it on the CPU): the backend must build and its tests
# must find a device. FERRY_REQUIRE_VULKAN=0 lets a machine without it build and skip them.
vulkan="-DFERRY_REQUIRE_VULKAN=$([ "${FERRY_REQUIRE_VULKAN:-1}" = 1 ] && echo ON || echo OFF)"
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=ON -DFERRY_BENCH=OFF $vulkan >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  dir=build-test
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release $vulkan >/dev/null
fi
cmake --build "$dir"
ctest --test-dir "$dir" --output-on-failure -j2
