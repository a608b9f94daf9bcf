#!/usr/bin/env bash
# Builds ferry, makes the bundled demo model and runs it split over two CPU devices, printing the
# plan first. Extra arguments go to `ferry generate` (e.g. --prompt "..." --max-tokens 64).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${FERRY_SKIP_DEPS:-0}" != 1 ]; then ./scripts/install-deps.sh; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_TESTS=OFF >/dev/null
cmake --build build --target ferry make_tiny_model
if [ ! -f build/demo-model/config.json ]; then
  ./build/make_tiny_model --arch llama --preset demo --seed 7 --format hf --out build/demo-model
fi
./build/ferry generate --model build/demo-model --devices cpu:0=256MiB,cpu:1=256MiB \
  --prompt "The ferry crossed the river" --max-tokens 32 --seed 1 --report "$@"
