#include "core/device.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <new>

#include "core/error.h"
#include "core/tensor.h"

namespace ferry {

DeviceId DeviceId::parse(std::string_view text) {
  const auto fail_parse = [&]() -> DeviceId {
    fail(ErrorKind::Usage,
         "unknown device '{}': expected cpu:N (for example cpu:0, cpu:1), vulkan:N (GPU N; vulkan:N.K for logical "
         "partition K of it), opaque:N (a CPU device whose memory only its backend reads, for testing), or cuda:N as "
         "a planning target",
         text);
  };
  const auto number = [](std::string_view digits, int& value) {
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return ec == std::errc() && ptr == digits.data() + digits.size() && value >= 0 && value <= 4095;
  };
  const size_t colon = text.find(':');
  std::string_view type_name = text.substr(0, colon);
  DeviceType type = DeviceType::Cpu;
  if (type_name == "cuda") {
    type = DeviceType::Cuda;
  } else if (type_name == "opaque") {
    type = DeviceType::Opaque;
  } else if (type_name == "vulkan") {
    type = DeviceType::Vulkan;
  } else if (type_name != "cpu") {
    return fail_parse();
  }
  if (colon == std::string_view::npos) return DeviceId{type, 0};
  std::string_view idx = text.substr(colon + 1);
  DeviceId id{type, -1};
  const size_t dot = idx.find('.');
  if (dot != std::string_view::npos) {
    if (type != DeviceType::Vulkan || !number(idx.substr(dot + 1), id.part)) return fail_parse();
    idx = idx.substr(0, dot);
  }
  if (!number(idx, id.index)) return fail_parse();
  return id;
}

std::string DeviceId::str() const {
  const char* kind = type == DeviceType::Cuda     ? "cuda"
                     : type == DeviceType::Opaque ? "opaque"
                     : type == DeviceType::Vulkan ? "vulkan"
                                                  : "cpu";
  if (part >= 0) return fmt::format("{}:{}.{}", kind, index, part);
  return fmt::format("{}:{}", kind, index);
}

Allocator::Allocator(std::string device_name, size_t budget) : device_name_(std::move(device_name)), budget_(budget) {}

void Allocator::charge(size_t bytes, std::string_view what) {
  const size_t r = rounded(bytes);
  size_t live = live_.load();
  for (;;) {
    if (budget_ != kUnlimited && (r > budget_ || live > budget_ - r)) {
      fail(ErrorKind::OutOfMemory,
           "out of memory on {}: {} needs {}, {} of the {} budget are in use ({} free); give {} a "
           "larger budget, place fewer modules there, or shorten the context",
           device_name_, what, format_bytes(bytes), format_bytes(live), format_bytes(budget_),
           format_bytes(budget_ - std::min(live, budget_)), device_name_);
    }
    if (live_.compare_exchange_weak(live, live + r)) break;
  }
  const size_t now = live + r;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void Allocator::refund(size_t bytes) {
  live_.fetch_sub(rounded(bytes));
}

Device::Device(DeviceId id, size_t budget_bytes) : id_(id), allocator_(id.str(), budget_bytes) {}

Device::~Device() = default;

Tensor Device::repack_weight(const Tensor& weight) {
  return weight;
}

std::shared_ptr<Storage> Device::allocate(size_t bytes, const std::string& what) {
  allocator_.charge(bytes, what);
  void* address = allocate_memory(Allocator::rounded(bytes));
  if (address == nullptr) {
    allocator_.refund(bytes);
    fail(ErrorKind::OutOfMemory, "out of memory on {}: the device could not provide {} for {}", name(),
         format_bytes(bytes), what);
  }
  auto s = std::make_shared<Storage>(Storage::Key{});
  s->address_ = address;
  s->size_ = bytes;
  s->device_ = this;
  s->host_addressable_ = host_addressable();
  s->owner_ = Storage::Owner::Device;
  return s;
}

std::shared_ptr<Storage> Device::adopt(void* data, size_t bytes, std::shared_ptr<const void> keep_alive,
                                       const std::string& what) {
  if (!host_addressable()) {
    fail(ErrorKind::Internal, "{} cannot use host memory in place for {}: its memory is not host memory", name(), what);
  }
  allocator_.charge(bytes, what);
  auto s = std::make_shared<Storage>(Storage::Key{});
  s->address_ = data;
  s->size_ = bytes;
  s->device_ = this;
  s->owner_ = Storage::Owner::Charged;
  s->keep_alive_ = std::move(keep_alive);
  return s;
}

size_t parse_byte_size(std::string_view text) {
  std::string_view num = text;
  size_t i = 0;
  while (i < num.size() && (std::isdigit(static_cast<unsigned char>(num[i])) || num[i] == '.')) ++i;
  const std::string number(num.substr(0, i));
  std::string unit(num.substr(i));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 0;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "kib" || unit == "k")
    mult = 1024.0;
  else if (unit == "mib" || unit == "m")
    mult = 1024.0 * 1024;
  else if (unit == "gib" || unit == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "tib" || unit == "t")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    mult = 1e3;
  else if (unit == "mb")
    mult = 1e6;
  else if (unit == "gb")
    mult = 1e9;
  else if (unit == "tb")
    mult = 1e12;
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (mult == 0 || number.empty() || end != number.c_str() + number.size() || !(value >= 0) || value * mult > 9.0e18) {
    fail(ErrorKind::Usage,
         "cannot read the byte size '{}': write a number with an optional unit, e.g. 6GiB, 512MiB, 2GB (units: "
         "B; KiB, MiB, GiB, TiB or K, M, G, T for powers of 1024; KB, MB, GB, TB for powers of 1000; any case)",
         text);
  }
  return static_cast<size_t>(std::llround(value * mult));
}

std::string format_bytes(size_t bytes) {
  if (bytes == Allocator::kUnlimited) return "unlimited";
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

std::vector<DeviceSpec> parse_device_list(std::string_view text) {
  std::vector<DeviceSpec> specs;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(start, comma - start);
    if (item.empty()) fail(ErrorKind::Usage, "empty entry in the device list '{}'", text);
    DeviceSpec spec;
    if (const size_t at = item.find('@'); at != std::string_view::npos) {
      const std::string_view count = item.substr(at + 1);
      auto [ptr, ec] = std::from_chars(count.data(), count.data() + count.size(), spec.threads);
      if (ec != std::errc() || ptr != count.data() + count.size() || spec.threads < 1 || spec.threads > 1024) {
        fail(ErrorKind::Usage, "'{}' in the device list: '@{}' is not a thread count (write e.g. cpu:0=6GiB@2)", item,
             count);
      }
      item = item.substr(0, at);
    }
    const size_t eq = item.find('=');
    spec.id = DeviceId::parse(item.substr(0, eq));
    if (eq != std::string_view::npos) spec.budget = parse_byte_size(item.substr(eq + 1));
    for (const auto& s : specs) {
      if (s.id == spec.id) fail(ErrorKind::Usage, "device {} is listed twice in '{}'", spec.id.str(), text);
    }
    specs.push_back(spec);
    start = comma + 1;
  }
  return specs;
}

std::vector<DeviceSpec> default_devices() {
  std::vector<DeviceSpec> specs;
  for (int node = 0; node < 1024; ++node) {
    std::ifstream meminfo(fmt::format("/sys/devices/system/node/node{}/meminfo", node));
    if (!meminfo) break;
    // "Node 0 MemTotal:       24567890 kB"
    std::string line;
    size_t kib = 0;
    while (std::getline(meminfo, line)) {
      const size_t at = line.find("MemTotal:");
      if (at == std::string::npos) continue;
      kib = static_cast<size_t>(std::strtoull(line.c_str() + at + 9, nullptr, 10));
      break;
    }
    specs.push_back(DeviceSpec{DeviceId{DeviceType::Cpu, node}, kib > 0 ? kib * 1024 : Allocator::kUnlimited, 0});
  }
  if (specs.empty()) specs.push_back(DeviceSpec{DeviceId{DeviceType::Cpu, 0}, Allocator::kUnlimited, 0});
  return specs;
}

std::string format_device_list(const std::vector<DeviceSpec>& specs) {
  std::string out;
  for (const auto& s : specs) {
    if (!out.empty()) out += ',';
    out += s.id.str();
    if (s.budget != Allocator::kUnlimited) out += fmt::format("={}", s.budget);
    if (s.threads > 0) out += fmt::format("@{}", s.threads);
  }
  return out;
}

}  // namespace ferry
