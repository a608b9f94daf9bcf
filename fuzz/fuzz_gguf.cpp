// libFuzzer target: a GGUF file held in memory. Any ferry::Error is the expected outcome for bad
// input; a crash, a sanitizer report, another exception, a hang or a broken invariant
// (__builtin_trap below) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"

namespace {

template <typename F>
void ignoring_errors(F&& f) {
  try {
    f();
  } catch (const ferry::Error&) {
  }
}

// Exercises every typed getter on every key: each either returns or throws ferry::Error.
void read_all_metadata(const ferry::GgufFile& g) {
  volatile uint64_t sink = 0;
  for (const std::string& key : g.keys()) {
    const ferry::GgufValue* v = g.find(key);
    if (v == nullptr) __builtin_trap();
    sink = sink + v->describe().size();
    ignoring_errors([&] { sink = sink + g.get_string(key).size(); });
    ignoring_errors([&] { sink = sink + g.get_u32(key); });
    ignoring_errors([&] { sink = sink + static_cast<uint64_t>(g.get_int(key)); });
    ignoring_errors([&] { sink = sink + static_cast<uint64_t>(g.get_f32(key) != 0.0f); });
    ignoring_errors([&] { sink = sink + g.get_bool(key); });
    ignoring_errors([&] { sink = sink + g.get_string_array(key).size(); });
    ignoring_errors([&] { sink = sink + g.get_f32_array(key).size(); });
    ignoring_errors([&] { sink = sink + g.get_i32_array(key).size(); });
  }
}

void check_records(const ferry::GgufFile& g, const ferry::MappedFile& file) {
  volatile uint64_t sink = 0;
  for (const ferry::TensorRecord& r : g.tensors().all()) {
    if (r.data < file.data() || r.data + r.nbytes > file.data() + file.size()) __builtin_trap();
    if ((r.data - file.data()) % static_cast<ptrdiff_t>(g.alignment()) != 0) __builtin_trap();
    if (r.nbytes > 0) sink = sink + r.data[0] + r.data[r.nbytes - 1];
    const auto expected = ferry::dtype_bytes(r.dtype, static_cast<uint64_t>(r.shape.numel()));
    if (!expected || *expected != r.nbytes) __builtin_trap();
    const ferry::Tensor t = r.view();
    if (t.nbytes() != r.nbytes || t.shape() != r.shape) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // A heap copy of exactly `size` bytes, so ASan flags any read past the end.
    auto file = ferry::MappedFile::from_bytes("fuzz.gguf", std::vector<uint8_t>(data, data + size));
    const ferry::GgufFile g = ferry::GgufFile::parse(file);
    read_all_metadata(g);
    check_records(g, *file);
  } catch (const ferry::Error&) {
  }
  return 0;
}
