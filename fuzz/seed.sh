#!/usr/bin/env bash
# Fills fuzz-corpus/<target>/ with seed inputs for the format fuzzers (the corpora are not
# committed). Seeds are:
#   - the smallest golden GGUF copied as it is (../shared/golden, or $FERRY_GOLDEN_DIR);
#   - "shrunk" copies of every golden checkpoint: the same header (metadata, tensor names, dtypes,
#     ranks) with tiny tensors, so mutations land on header bytes instead of weights;
#   - a few hand-made files covering every dtype and GGUF value type (nested arrays, v2, a custom
#     alignment).
# Usage: fuzz/seed.sh [corpus-dir]   (default: fuzz-corpus next to fuzz/)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
golden="${FERRY_GOLDEN_DIR:-$root/../shared/golden}"
corpus="${1:-$root/fuzz-corpus}"

mkdir -p "$corpus/fuzz_safetensors" "$corpus/fuzz_gguf"

if [[ -d "$golden" ]]; then
  # The smallest golden GGUF (82 KB), unchanged. The golden safetensors files (450+ KB, nearly all
  # weights) only enter as shrunk copies: large seeds slow every execution and mutations would
  # mostly hit weight bytes.
  if [[ -f "$golden/text/llama_q4_0/model.gguf" ]]; then
    install -m 0644 "$golden/text/llama_q4_0/model.gguf" "$corpus/fuzz_gguf/golden_llama_q4_0.gguf"
  fi
else
  echo "seed.sh: no golden directory at $golden; writing hand-made seeds only" >&2
fi

if ! command -v python3 >/dev/null; then
  echo "seed.sh: python3 not found; skipping shrunk and hand-made seeds" >&2
  exit 0
fi

python3 - "$golden" "$corpus" <<'PY'
import json, os, struct, sys

golden, corpus = sys.argv[1], sys.argv[2]
st_dir = os.path.join(corpus, "fuzz_safetensors")
gg_dir = os.path.join(corpus, "fuzz_gguf")

# ---- safetensors ----
ST_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U8": 1, "BOOL": 1}

def st_file(entries, metadata=None):
    """entries: list of (name, dtype, shape); data is a byte ramp."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in entries:
        n = 1
        for d in shape:
            n *= d
        size = n * ST_SIZE[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + bytes(i & 0xFF for i in range(offset))

def write(path, data):
    with open(path, "wb") as f:
        f.write(data)

write(os.path.join(st_dir, "types.safetensors"),
      st_file([("a", "F32", [2, 3]), ("b", "F16", [4]), ("c", "BF16", [1, 2]), ("s", "F32", []),
               ("e", "F32", [0, 5])], {"format": "pt"}))
write(os.path.join(st_dir, "unsupported.safetensors"), st_file([("ids", "I64", [3])]))
write(os.path.join(st_dir, "empty_header.safetensors"), st_file([]))

def shrink_safetensors(src, dst):
    blob = open(src, "rb").read()
    n = struct.unpack_from("<Q", blob)[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", None)
    entries = [(k, v["dtype"], [min(d, 2) for d in v["shape"]]) for k, v in header.items()]
    write(dst, st_file(entries, meta))

for sub in ("text", "glm"):
    base = os.path.join(golden, sub)
    if not os.path.isdir(base):
        continue
    for case in sorted(os.listdir(base)):
        for rel in ("hf/model.safetensors", "model/model.safetensors"):
            src = os.path.join(base, case, rel)
            if os.path.isfile(src):
                shrink_safetensors(src, os.path.join(st_dir, f"shrunk_{case}.safetensors"))

# ---- GGUF ----
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18)}  # ggml type -> (block, bytes)

def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b

def skip_value(blob, pos, vtype):
    if vtype in FIXED:
        return pos + FIXED[vtype]
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", blob, pos)
        return pos + 8 + n
    if vtype == 9:
        etype, count = struct.unpack_from("<IQ", blob, pos)
        pos += 12
        if etype in FIXED:
            return pos + FIXED[etype] * count
        for _ in range(count):
            pos = skip_value(blob, pos, etype)
        return pos
    raise ValueError(f"value type {vtype}")

def tensor_infos(tensors, alignment=32):
    """tensors: list of (name, ne, ggml_type); returns (info bytes, data bytes)."""
    infos, data = b"", b""
    for name, ne, gtype in tensors:
        block, nbytes = BLOCK[gtype]
        n = 1
        for d in ne:
            n *= d
        size = n // block * nbytes
        data += bytes(-len(data) % alignment)
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", gtype, len(data))
        data += bytes((i * 7) & 0xFF for i in range(size))
    return infos, data

def gguf_file(version, kv_bytes, n_kv, tensors, alignment=32):
    infos, data = tensor_infos(tensors, alignment)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), n_kv) + kv_bytes + infos
    return head + bytes(-len(head) % alignment) + data

def shrink_gguf(src, dst):
    blob = open(src, "rb").read()
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", blob, 4)
    pos = 24
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", blob, pos)
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", blob, pos)
        pos = skip_value(blob, pos + 4, vtype)
    kv_bytes = blob[24:pos]
    tensors = []
    for _ in range(n_tensors):
        (nlen,) = struct.unpack_from("<Q", blob, pos)
        name = blob[pos + 8:pos + 8 + nlen]
        pos += 8 + nlen
        (n_dims,) = struct.unpack_from("<I", blob, pos)
        pos += 4 + 8 * n_dims
        gtype, _ = struct.unpack_from("<IQ", blob, pos)
        pos += 12
        block = BLOCK.get(gtype, (1, 4))[0]
        ne = [block if i == 0 else 1 for i in range(n_dims)]
        tensors.append((name, ne, gtype if gtype in BLOCK else 0))
    write(dst, gguf_file(version, kv_bytes, n_kv, tensors))

text = os.path.join(golden, "text")
if os.path.isdir(text):
    for case in sorted(os.listdir(text)):
        src = os.path.join(text, case, "model.gguf")
        if os.path.isfile(src):
            shrink_gguf(src, os.path.join(gg_dir, f"shrunk_{case}.gguf"))

def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload

every_type = b"".join([
    kv("general.architecture", 8, gstr("llama")),
    kv("k.u8", 0, b"\xc8"), kv("k.i8", 1, b"\xfd"), kv("k.u16", 2, struct.pack("<H", 4660)),
    kv("k.i16", 3, struct.pack("<h", -2)), kv("llama.context_length", 4, struct.pack("<I", 2048)),
    kv("k.i32", 5, struct.pack("<i", -5)), kv("k.f32", 6, struct.pack("<f", 1.5)), kv("k.bool", 7, b"\x01"),
    kv("k.u64", 10, struct.pack("<Q", 1 << 40)), kv("k.i64", 11, struct.pack("<q", -(1 << 40))),
    kv("k.f64", 12, struct.pack("<d", 0.25)),
    kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + gstr("a") + gstr("bc") + gstr("")),
    kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<ff", 1.0, -2.0)),
    kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, 2) + struct.pack("<ii", -1, 7)),
    kv("k.nested", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 4, 2) + struct.pack("<II", 1, 2)
       + struct.pack("<IQ", 8, 1) + gstr("deep")),
])
all_tensors = [("w", [4, 2], 0), ("q", [32, 2], 8), ("h", [3], 1), ("b", [2, 1, 1], 30), ("z", [32], 2)]
write(os.path.join(gg_dir, "every_type_v3.gguf"), gguf_file(3, every_type, 16, all_tensors))
write(os.path.join(gg_dir, "every_type_v2.gguf"), gguf_file(2, every_type, 16, all_tensors))
align64 = kv("general.alignment", 4, struct.pack("<I", 64))
write(os.path.join(gg_dir, "align64.gguf"), gguf_file(3, align64, 1, [("a", [4], 0), ("b", [4], 0)], 64))
write(os.path.join(gg_dir, "metadata_only.gguf"), gguf_file(3, every_type, 16, []))
PY

echo "seeds: $(ls "$corpus/fuzz_safetensors" | wc -l) in $corpus/fuzz_safetensors, $(ls "$corpus/fuzz_gguf" | wc -l) in $corpus/fuzz_gguf"
