// libFuzzer target: a safetensors file held in memory. Any ferry::Error is the expected outcome
// for bad input; a crash, a sanitizer report, another exception, a hang or a broken invariant
// (__builtin_trap below) is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "formats/safetensors.h"

namespace {

// Every record the reader returns must lie inside the file and view cleanly; reading its first
// and last byte lets ASan catch a range that does not.
void check_records(const ferry::TensorSet& set, const ferry::MappedFile& file) {
  volatile uint64_t sink = 0;
  for (const ferry::TensorRecord& r : set.all()) {
    if (r.nbytes > 0) {
      if (r.data < file.data() || r.data + r.nbytes > file.data() + file.size()) __builtin_trap();
      sink = sink + r.data[0] + r.data[r.nbytes - 1];
    }
    const auto expected = ferry::dtype_bytes(r.dtype, static_cast<uint64_t>(r.shape.numel()));
    if (!expected || *expected != r.nbytes) __builtin_trap();
    const ferry::Tensor t = r.view();
    if (t.nbytes() != r.nbytes || t.shape() != r.shape) __builtin_trap();
  }
  for (const auto& [key, value] : set.metadata()) sink = sink + key.size() + value.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // A heap copy of exactly `size` bytes, so ASan flags any read past the end.
    auto file = ferry::MappedFile::from_bytes("fuzz.safetensors", std::vector<uint8_t>(data, data + size));
    const ferry::TensorSet set = ferry::read_safetensors_file(file);
    check_records(set, *file);
  } catch (const ferry::Error&) {
  }
  return 0;
}
