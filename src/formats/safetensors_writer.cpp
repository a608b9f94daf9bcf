#include "formats/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace ferry {

size_t WriteTensor::nbytes() const {
  for (int i = 0; i < shape.rank; ++i) {
    if (shape[i] < 0) fail(ErrorKind::Usage, "tensor '{}': negative dimension in shape {}", name, shape.str());
  }
  const std::optional<size_t> n = dtype_bytes(dtype, static_cast<uint64_t>(shape.numel()));
  if (!n) {
    fail(ErrorKind::Usage, "tensor '{}': {} elements of shape {} are not a whole number of {} blocks ({} per block)",
         name, shape.numel(), shape.str(), dtype_name(dtype), dtype_traits(dtype).block_size);
  }
  if (dtype_traits(dtype).is_quantized && shape.last() % dtype_traits(dtype).block_size != 0) {
    fail(ErrorKind::Usage, "tensor '{}': {} needs rows that are a multiple of {} elements, shape {} has rows of {}",
         name, dtype_name(dtype), dtype_traits(dtype).block_size, shape.str(), shape.last());
  }
  return *n;
}

void WriteTensor::check_source() const {
  const int sources = (data != nullptr ? 1 : 0) + (!bytes.empty() ? 1 : 0) + (fill ? 1 : 0);
  const size_t n = nbytes();
  if (sources == 0 && n == 0) return;  // an empty tensor needs no bytes
  if (sources != 1) {
    fail(ErrorKind::Usage, "tensor '{}': set exactly one of data, bytes or fill (found {})", name, sources);
  }
  if (!bytes.empty() && bytes.size() != n) {
    fail(ErrorKind::Usage, "tensor '{}': {} bytes given, {} {} of shape {} needs {}", name, bytes.size(),
         dtype_name(dtype), shape.numel(), shape.str(), n);
  }
}

void WriteTensor::emit(const std::function<void(const uint8_t*, size_t)>& out) const {
  const size_t n = nbytes();
  if (n == 0) return;
  if (data != nullptr) {
    out(static_cast<const uint8_t*>(data), n);
  } else if (!bytes.empty()) {
    out(bytes.data(), n);
  } else if (fill) {
    std::unique_ptr<uint8_t[]> scratch(new uint8_t[n]);
    fill(scratch.get(), n);
    out(scratch.get(), n);
  } else {
    fail(ErrorKind::Usage, "tensor '{}' has no bytes to write", name);
  }
}

OutputFile::OutputFile(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) {
    fail(ErrorKind::Io, "cannot create '{}': {} (check that the directory exists and is writable)", path,
         std::strerror(errno));
  }
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

OutputFile::~OutputFile() {
  if (file_ != nullptr) {  // not closed: a failed write; leave nothing behind
    std::fclose(file_);
    std::remove(path_.c_str());
  }
}

void OutputFile::write(const void* data, size_t n) {
  if (n == 0) return;
  if (std::fwrite(data, 1, n, file_) != n) {
    fail(ErrorKind::Io, "cannot write {} bytes to '{}' at offset {}: {}", n, path_, offset_, std::strerror(errno));
  }
  offset_ += n;
}

void OutputFile::write_zeros(size_t n) {
  static const uint8_t zeros[64] = {};
  while (n > 0) {
    const size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
    write(zeros, k);
    n -= k;
  }
}

void OutputFile::close() {
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fflush(f) != 0 || std::ferror(f) != 0) {
    const int err = errno;
    std::fclose(f);
    std::remove(path_.c_str());
    fail(ErrorKind::Io, "cannot finish writing '{}': {}", path_, std::strerror(err));
  }
  if (std::fclose(f) != 0) {
    const int err = errno;
    std::remove(path_.c_str());
    fail(ErrorKind::Io, "cannot close '{}': {}", path_, std::strerror(err));
  }
}

const char* safetensors_dtype_name(DType dtype, const std::string& tensor_name) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    default:
      break;
  }
  fail(ErrorKind::Unsupported, "tensor '{}': safetensors cannot hold {} (a GGUF block format); use f32, f16 or bf16",
       tensor_name, dtype_name(dtype));
}

void write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const WriteTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      fail(ErrorKind::Usage, "'{}': invalid tensor name '{}'", path, t.name);
    }
    if (!names.insert(t.name).second) fail(ErrorKind::Usage, "'{}': tensor '{}' given twice", path, t.name);
    t.check_source();
    const size_t n = t.nbytes();
    nlohmann::ordered_json entry;
    entry["dtype"] = safetensors_dtype_name(t.dtype, t.name);
    entry["shape"] = nlohmann::ordered_json::array();
    for (int i = 0; i < t.shape.rank; ++i) entry["shape"].push_back(t.shape[i]);
    entry["data_offsets"] = {offset, offset + n};
    header[t.name] = std::move(entry);
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // data starts 8-byte aligned

  OutputFile file(path);
  uint8_t length[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(len >> (8 * i));
  file.write(length, sizeof(length));
  file.write(text.data(), text.size());
  for (const WriteTensor& t : tensors) {
    t.emit([&](const uint8_t* p, size_t n) { file.write(p, n); });
  }
  file.close();
}

std::vector<std::string> write_safetensors_sharded(const std::string& dir, const std::vector<WriteTensor>& tensors,
                                                   int n_shards, const std::map<std::string, std::string>& metadata) {
  namespace fs = std::filesystem;
  if (n_shards < 1) fail(ErrorKind::Usage, "'{}': number of shards must be at least 1, got {}", dir, n_shards);
  if (n_shards == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, metadata);
    return {"model.safetensors"};
  }
  const size_t n = static_cast<size_t>(n_shards);
  if (n > tensors.size()) {
    fail(ErrorKind::Usage, "'{}': cannot split {} tensors into {} shards (each shard needs at least one)", dir,
         tensors.size(), n_shards);
  }

  // Assign tensors in order; move to the next shard once this one reaches its share of the bytes,
  // or when every remaining shard needs one of the remaining tensors.
  uint64_t total = 0;
  std::set<std::string> names;
  for (const WriteTensor& t : tensors) {
    if (!names.insert(t.name).second) fail(ErrorKind::Usage, "'{}': tensor '{}' given twice", dir, t.name);
    total += t.nbytes();
  }
  std::vector<size_t> shard_of(tensors.size());
  size_t shard = 0;
  size_t in_shard = 0;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t remaining_tensors = tensors.size() - i;
    const size_t remaining_shards = n - 1 - shard;
    const bool share_full = cumulative * n >= (shard + 1) * total;
    if (in_shard > 0 && shard + 1 < n && (share_full || remaining_tensors == remaining_shards)) {
      ++shard;
      in_shard = 0;
    }
    shard_of[i] = shard;
    ++in_shard;
    cumulative += tensors[i].nbytes();
  }

  std::vector<std::string> files;
  for (size_t s = 0; s < n; ++s) files.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n));
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < n; ++s) {
    std::vector<WriteTensor> part;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (shard_of[i] != s) continue;
      // Borrow the caller's bytes instead of copying them.
      WriteTensor view{tensors[i].name, tensors[i].dtype, tensors[i].shape, tensors[i].data, {}, tensors[i].fill};
      if (!tensors[i].bytes.empty()) view.data = tensors[i].bytes.data();
      part.push_back(std::move(view));
      weight_map[tensors[i].name] = files[s];
    }
    write_safetensors((fs::path(dir) / files[s]).string(), part, metadata);
  }

  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = std::move(weight_map);
  const std::string text = index.dump(2) + "\n";
  OutputFile file((fs::path(dir) / "model.safetensors.index.json").string());
  file.write(text.data(), text.size());
  file.close();
  return files;
}

}  // namespace ferry
