#include "formats/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "formats/json_file.h"
#include "formats/shape_limits.h"

namespace ferry {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A valid header nests three levels (root, tensor entry, shape); anything much deeper is not
// safetensors and is refused early.
constexpr int kMaxJsonDepth = 8;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string short_dump(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMax = 80;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

// Dtype names of the safetensors spec that ferry recognises but does not load.
bool is_known_safetensors_dtype(std::string_view name) {
  static constexpr std::string_view kKnown[] = {"BOOL",    "U8",      "I8",      "I16",     "U16", "I32",
                                                "U32",     "I64",     "U64",     "F64",     "C64", "F8_E5M2",
                                                "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4"};
  return std::find(std::begin(kKnown), std::end(kKnown), name) != std::end(kKnown);
}

std::optional<DType> supported_dtype(std::string_view name) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  return std::nullopt;
}

// Parses the JSON text of the header, refusing deep nesting and duplicate tensor names (which a
// plain JSON object would silently collapse to the last one).
json parse_header_json(const char* begin, const char* end, const std::string& filename) {
  std::unordered_set<std::string> seen;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) {
      fail(ErrorKind::Format, "{}: header JSON nests deeper than {} levels; this is not a safetensors header", filename,
           kMaxJsonDepth);
    }
    if (event == json::parse_event_t::key && depth == 1) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) {
        fail(ErrorKind::Format, "{}: tensor '{}' appears twice in the header; each name must be unique", filename, key);
      }
    }
    return true;
  };
  try {
    return json::parse(begin, end, callback);
  } catch (const json::parse_error& e) {
    fail(ErrorKind::Format, "{}: header is not valid JSON (byte {} of the header): {}", filename, e.byte, e.what());
  } catch (const json::exception& e) {
    fail(ErrorKind::Format, "{}: header is not valid JSON: {}", filename, e.what());
  }
}

const json& required_field(const json& entry, const char* field, const std::string& name, const std::string& filename) {
  const auto it = entry.find(field);
  if (it == entry.end()) {
    fail(ErrorKind::Format,
         "{}: tensor '{}' has no \"{}\" (entry: {}); every tensor needs dtype, shape and data_offsets", filename, name,
         field, short_dump(entry));
  }
  return *it;
}

uint64_t offset_value(const json& value, const char* which, const std::string& name, const std::string& filename) {
  if (!value.is_number_unsigned()) {
    fail(ErrorKind::Format, "{}: tensor '{}': data_offsets {} is {}, expected a non-negative integer", filename, name,
         which, json_describe(value));
  }
  return value.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                             const std::string& filename) {
  if (!entry.is_object()) {
    fail(ErrorKind::Format, "{}: tensor '{}' is {}, expected an object with dtype, shape and data_offsets", filename,
         name, json_describe(entry));
  }
  const json& dtype_json = required_field(entry, "dtype", name, filename);
  const json& shape_json = required_field(entry, "shape", name, filename);
  const json& offsets_json = required_field(entry, "data_offsets", name, filename);

  SafetensorsEntry out;
  out.name = name;

  // Where the bytes are: checked first, since a tensor outside the file is corrupt whatever its dtype.
  if (!offsets_json.is_array() || offsets_json.size() != 2) {
    fail(ErrorKind::Format, "{}: tensor '{}': data_offsets is {}, expected [begin, end]", filename, name,
         short_dump(offsets_json));
  }
  out.begin = offset_value(offsets_json[0], "begin", name, filename);
  out.end = offset_value(offsets_json[1], "end", name, filename);
  if (out.begin > out.end) {
    fail(ErrorKind::Format, "{}: tensor '{}': data_offsets [{}, {}] has begin after end", filename, name, out.begin,
         out.end);
  }
  if (out.end > data_size) {
    fail(ErrorKind::Format,
         "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes); the file is "
         "truncated or its header is wrong",
         filename, name, out.begin, out.end, data_size);
  }

  if (!dtype_json.is_string()) {
    fail(ErrorKind::Format, "{}: tensor '{}': dtype is {}, expected a string such as \"F32\"", filename, name,
         json_describe(dtype_json));
  }
  const std::string& dtype_name_str = dtype_json.get_ref<const std::string&>();
  const std::optional<DType> dtype = supported_dtype(dtype_name_str);
  if (!dtype) {
    if (is_known_safetensors_dtype(dtype_name_str)) {
      fail(ErrorKind::Unsupported,
           "{}: tensor '{}' has dtype {}, which ferry does not load (supported: F32, F16, BF16); convert the "
           "checkpoint to one of those",
           filename, name, dtype_name_str);
    }
    fail(ErrorKind::Format, "{}: tensor '{}' has unknown dtype \"{}\" (safetensors names are F32, F16, BF16, I64, ...)",
         filename, name, short_dump(dtype_json));
  }
  out.dtype = *dtype;

  if (!shape_json.is_array()) {
    fail(ErrorKind::Format, "{}: tensor '{}': shape is {}, expected an array of dimensions", filename, name,
         json_describe(shape_json));
  }
  if (shape_json.size() > static_cast<size_t>(kMaxDims)) {
    fail(ErrorKind::Unsupported, "{}: tensor '{}' has {} dimensions (shape {}); ferry handles at most {}", filename,
         name, shape_json.size(), short_dump(shape_json), kMaxDims);
  }
  uint64_t dims[kMaxDims] = {};
  for (const json& dim : shape_json) {
    if (!dim.is_number_unsigned()) {
      fail(ErrorKind::Format, "{}: tensor '{}': shape {} has {}, expected non-negative integers", filename, name,
           short_dump(shape_json), json_describe(dim));
    }
    dims[out.shape.rank++] = dim.get<uint64_t>();
  }
  const std::optional<uint64_t> nonzero = nonzero_element_count(dims, out.shape.rank);
  if (!nonzero) {
    fail(ErrorKind::Format, "{}: tensor '{}': shape {} has more than 2^56 elements; the header is corrupt", filename,
         name, short_dump(shape_json));
  }
  for (int i = 0; i < out.shape.rank; ++i) out.shape.dims[static_cast<size_t>(i)] = static_cast<int64_t>(dims[i]);
  const uint64_t numel = out.shape.numel() == 0 ? 0 : *nonzero;
  const std::optional<size_t> expected = dtype_bytes(out.dtype, numel);
  if (!expected || *expected != out.end - out.begin) {
    fail(ErrorKind::Format, "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {} bytes",
         filename, name, out.shape.str(), dtype_name_str, expected ? *expected : 0, out.begin, out.end,
         out.end - out.begin);
  }
  return out;
}

void check_no_overlap(const std::vector<SafetensorsEntry>& tensors, const std::string& filename) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& t : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsEntry& prev = *by_offset[i - 1];
    const SafetensorsEntry& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      fail(ErrorKind::Format, "{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap in the data section", filename,
           prev.name, prev.begin, prev.end, cur.name, cur.begin, cur.end);
    }
  }
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& filename) {
  if (size < 8) {
    fail(ErrorKind::Format, "{}: file is {} bytes, too short for the 8-byte header length of a safetensors file",
         filename, size);
  }
  const uint64_t header_len = read_u64_le(data);
  if (header_len > kMaxSafetensorsHeaderBytes) {
    fail(ErrorKind::Format,
         "{}: header length {} is larger than the {} byte limit; the file is corrupt or not safetensors", filename,
         header_len, kMaxSafetensorsHeaderBytes);
  }
  if (header_len > size - 8) {
    fail(ErrorKind::Format, "{}: header length {} runs past the end of the file ({} bytes); the file is truncated",
         filename, header_len, size);
  }

  SafetensorsHeader header;
  header.data_start = 8 + header_len;
  header.data_size = size - header.data_start;

  const auto* text = reinterpret_cast<const char*>(data + 8);
  const json root = parse_header_json(text, text + header_len, filename);
  if (!root.is_object()) {
    fail(ErrorKind::Format, "{}: header is {}, expected a JSON object mapping tensor names to entries", filename,
         json_describe(root));
  }

  header.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        fail(ErrorKind::Format, "{}: __metadata__ is {}, expected an object of strings", filename,
             json_describe(entry));
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          fail(ErrorKind::Format, "{}: __metadata__ field '{}' is {}, expected a string", filename, key,
               json_describe(value));
        }
        header.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    header.tensors.push_back(parse_entry(name, entry, header.data_size, filename));
  }
  check_no_overlap(header.tensors, filename);
  return header;
}

TensorSet read_safetensors_file(std::shared_ptr<const MappedFile> file) {
  if (!file) fail(ErrorKind::Internal, "read_safetensors_file: no file");
  const SafetensorsHeader header = parse_safetensors_header(file->data(), file->size(), file->path());
  TensorSet set;
  for (const auto& [key, value] : header.metadata) set.add_metadata(key, value);
  for (const SafetensorsEntry& entry : header.tensors) {
    TensorRecord record;
    record.name = entry.name;
    record.dtype = entry.dtype;
    record.shape = entry.shape;
    record.data = file->data() + header.data_start + entry.begin;
    record.nbytes = static_cast<size_t>(entry.end - entry.begin);
    record.file = file;
    set.add(std::move(record));
  }
  return set;
}

namespace {

// A shard name from the index must stay inside the checkpoint directory.
fs::path shard_path(const fs::path& dir, const std::string& shard, const std::string& tensor,
                    const std::string& index_file) {
  const fs::path rel(shard);
  bool escapes = shard.empty() || rel.is_absolute();
  for (const auto& part : rel) {
    if (part == "..") escapes = true;
  }
  if (escapes) {
    fail(ErrorKind::Format, "{}: weight_map puts tensor '{}' in \"{}\", which is not a file name inside {}", index_file,
         tensor, shard, dir.string());
  }
  return dir / rel;
}

TensorSet open_sharded(const fs::path& index_path) {
  const std::string index_file = index_path.string();
  const json index = read_json_file(index_file, ErrorKind::Format);
  if (!index.is_object()) {
    fail(ErrorKind::Format, "{}: expected a JSON object with a \"weight_map\", found {}", index_file,
         json_describe(index));
  }
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    fail(ErrorKind::Format, "{}: no \"weight_map\" object mapping tensor names to shard files", index_file);
  }
  if (wm->empty()) fail(ErrorKind::Format, "{}: weight_map is empty", index_file);

  const fs::path dir = index_path.parent_path().empty() ? fs::path(".") : index_path.parent_path();
  std::map<std::string, std::string> shard_of;  // tensor -> shard, as the index says
  std::vector<std::string> shards;              // in order of first mention
  std::map<std::string, std::string> first_tensor_of_shard;
  for (const auto& [tensor, shard_json] : wm->items()) {
    if (!shard_json.is_string()) {
      fail(ErrorKind::Format, "{}: weight_map entry for '{}' is {}, expected a shard file name", index_file, tensor,
           json_describe(shard_json));
    }
    const std::string& shard = shard_json.get_ref<const std::string&>();
    shard_path(dir, shard, tensor, index_file);
    shard_of.emplace(tensor, shard);
    if (first_tensor_of_shard.emplace(shard, tensor).second) shards.push_back(shard);
  }

  TensorSet set;
  for (const std::string& shard : shards) {
    const fs::path path = shard_path(dir, shard, first_tensor_of_shard[shard], index_file);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      fail(ErrorKind::Io, "{}: shard '{}' (holding tensor '{}' among others) is missing: no file {}", index_file, shard,
           first_tensor_of_shard[shard], path.string());
    }
    TensorSet part = read_safetensors_file(MappedFile::open(path.string()));
    for (const auto& [key, value] : part.metadata()) set.add_metadata(key, value);
    for (const TensorRecord& record : part.all()) {
      if (set.find(record.name) != nullptr) set.add(record);  // throws: duplicate, naming both files
      const auto listed = shard_of.find(record.name);
      if (listed == shard_of.end()) {
        fail(ErrorKind::Format, "{}: tensor '{}' is in shard '{}' but not in the index {}; the index is out of date",
             path.string(), record.name, shard, index_file);
      }
      if (listed->second != shard) {
        fail(ErrorKind::Format, "{}: tensor '{}' is in shard '{}' but the index {} says it is in '{}'", path.string(),
             record.name, shard, index_file, listed->second);
      }
      set.add(record);
    }
  }
  for (const auto& [tensor, shard] : shard_of) {
    if (set.find(tensor) == nullptr) {
      fail(ErrorKind::Format, "{}: the index lists tensor '{}' in shard '{}', but that shard has no such tensor",
           index_file, tensor, shard);
    }
  }
  return set;
}

}  // namespace

namespace {

// Why `file` (expected in a model directory) cannot be read as a file, or empty when it can: a
// dangling link, a FIFO, a directory, a device. Weights are memory-mapped: only regular files do.
std::string not_a_file(const fs::path& file) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(file, ec);
  if (ec || !fs::exists(link)) return {};
  const fs::file_status target = fs::status(file, ec);
  if (fs::is_symlink(link) && (ec || !fs::exists(target))) {
    return fmt::format("{} is a link to {}, which does not exist", file.string(), fs::read_symlink(file, ec).string());
  }
  if (fs::is_regular_file(target)) return {};
  const char* kind = fs::is_fifo(target)        ? "a FIFO"
                     : fs::is_directory(target) ? "a directory"
                     : fs::is_socket(target)    ? "a socket"
                                                : "a device or other special file";
  return fmt::format("{} is {}, not a regular file (weights are memory-mapped from files)", file.string(), kind);
}

}  // namespace

TensorSet open_safetensors(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    const fs::path index = p / "model.safetensors.index.json";
    if (fs::is_regular_file(index, ec)) return open_sharded(index);
    const fs::path single = p / "model.safetensors";
    if (fs::is_regular_file(single, ec)) return read_safetensors_file(MappedFile::open(single.string()));
    for (const fs::path& expected : {index, single}) {
      if (const std::string why = not_a_file(expected); !why.empty()) fail(ErrorKind::Io, "{}: {}", path, why);
    }
    // Other safetensors files, regular ones only: those can be passed directly.
    std::vector<std::string> found;
    for (const auto& item : fs::directory_iterator(p, ec)) {
      if (item.path().extension() == ".safetensors" && fs::is_regular_file(item.path(), ec) && found.size() < 5) {
        found.push_back(item.path().filename());
      }
    }
    if (found.empty()) {
      fail(ErrorKind::Io, "{}: no model.safetensors or model.safetensors.index.json in this directory", path);
    }
    fail(ErrorKind::Io,
         "{}: no model.safetensors or model.safetensors.index.json in this directory; found: {}; pass one of them "
         "directly (--model {}/{})",
         path, fmt::join(found, ", "), path, found.front());
  }
  if (const std::string why = not_a_file(p); !why.empty()) fail(ErrorKind::Io, "{}", why);
  const std::string name = p.filename().string();
  if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".json") == 0) return open_sharded(p);
  return read_safetensors_file(MappedFile::open(path));
}

}  // namespace ferry
