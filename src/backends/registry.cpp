#include "backends/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/bandwidth.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/opaque/opaque_device.h"
#include "core/error.h"
#if FERRY_HAVE_VULKAN
#include "backends/vulkan/device.h"
#endif

namespace ferry {

namespace {

struct Entry {
  DeviceType type;
  DeviceFactory make;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
    {DeviceType::Cpu,
     [](const DeviceSpec& s, int threads) { return std::make_unique<cpu::CpuDevice>(s.id, s.budget, threads); }},
    {DeviceType::Opaque,
     [](const DeviceSpec& s, int threads) { return std::make_unique<opaque::OpaqueDevice>(s.id, s.budget, threads); }},
#if FERRY_HAVE_VULKAN
    {DeviceType::Vulkan, [](const DeviceSpec& s, int) { return vulkan::make_device(s); }},
#endif
  };
  return entries;
}

}  // namespace

void resolve_default_budgets(std::vector<DeviceSpec>& specs) {
  const bool needed = std::any_of(specs.begin(), specs.end(), [](const DeviceSpec& s) {
    return s.id.type == DeviceType::Vulkan && s.budget == Allocator::kUnlimited;
  });
  if (!needed) return;
#if FERRY_HAVE_VULKAN
  vulkan::resolve_default_budgets(specs);
#else
  for (const auto& s : specs) {
    if (s.id.type == DeviceType::Vulkan && s.budget == Allocator::kUnlimited) {
      fail(ErrorKind::Unsupported,
           "{} has no budget and this build of ferry has no Vulkan backend to read its free memory; give it one "
           "({}=24GiB) to plan for another machine, or install libvulkan-dev and glslc (scripts/install-deps.sh) and "
           "rebuild",
           s.id.str(), s.id.str());
    }
  }
#endif
}

namespace {

// A line's number from /proc/meminfo ("MemAvailable:   123456 kB"), in bytes; 0 when absent.
uint64_t meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + std::strlen(key), nullptr, 10) * 1024;
  }
  return 0;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "CPU";
}

}  // namespace

DeviceListing list_devices() {
  DeviceListing out;
  const std::vector<DeviceSpec> cpus = default_devices();
  for (const DeviceSpec& s : cpus) {
    DeviceDescription d;
    d.id = s.id;
    d.name = cpus.size() > 1 ? fmt::format("{} (NUMA node {})", cpu_model_name(), s.id.index) : cpu_model_name();
    d.kind = "cpu";
    d.total_bytes = s.budget != Allocator::kUnlimited ? s.budget : meminfo_bytes("MemTotal:");
    if (cpus.size() == 1) {  // the machine's available memory is this device's, up to its size
      d.free_bytes = std::min(meminfo_bytes("MemAvailable:"), d.total_bytes);
      d.free_measured = d.free_bytes > 0;
    }
    d.default_budget = s.budget;
    d.features = {{"simd", kernels::simd_level()}, {"threads", std::to_string(std::thread::hardware_concurrency())}};
    out.devices.push_back(std::move(d));
  }
#if FERRY_HAVE_VULKAN
  try {
    for (DeviceDescription& d : vulkan::describe_devices()) out.devices.push_back(std::move(d));
  } catch (const Error& e) {
    out.unavailable.push_back(fmt::format("vulkan: {}", e.what()));
  }
#else
  out.unavailable.push_back(
      "vulkan: this build has no Vulkan backend (install libvulkan-dev and glslc: scripts/install-deps.sh, and "
      "rebuild)");
#endif
  return out;
}

double measure_read_bandwidth(Device& device) {
#if FERRY_HAVE_VULKAN
  if (auto* gpu = dynamic_cast<vulkan::VulkanDevice*>(&device)) return gpu->measure_read_bandwidth();
#endif
  // CPU and opaque devices keep their memory in host RAM: the CPU probe with the device's threads.
  ThreadPool pool(device.threads());
  return kernels::measure_read_bandwidth(pool);
}

bool can_create(DeviceType type) {
  const auto& r = registry();
  return std::any_of(r.begin(), r.end(), [&](const Entry& e) { return e.type == type; });
}

std::unique_ptr<Device> create_device(const DeviceSpec& spec, int threads) {
  for (const Entry& e : registry()) {
    if (e.type == spec.id.type) return e.make(spec, std::max(1, threads));
  }
  if (spec.id.type == DeviceType::Vulkan) {
    fail(ErrorKind::Unsupported,
         "{}: this build of ferry has no Vulkan backend (it was built without the Vulkan headers or glslc); install "
         "them (scripts/install-deps.sh: libvulkan-dev glslc mesa-vulkan-drivers) and rebuild, or run on cpu:N devices",
         spec.id.str());
  }
  fail(ErrorKind::Unsupported,
       "{} is a planning target only: ferry has no kernels for it in this build; run on cpu:N devices, or use "
       "`ferry plan` to plan for {}",
       spec.id.str(), spec.id.str());
}

DeviceSet::DeviceSet(const std::vector<DeviceSpec>& specs, int total_threads) {
  if (specs.empty()) fail(ErrorKind::Usage, "no devices given");
  const int n = static_cast<int>(specs.size());
  const int share = std::max(1, total_threads / n);
  std::vector<DeviceSpec> resolved = specs;
  resolve_default_budgets(resolved);
  for (const auto& s : resolved) add(create_device(s, s.threads > 0 ? s.threads : share));
}

void DeviceSet::add(std::unique_ptr<Device> device) {
  for (const auto& d : devices_) {
    if (d->id() == device->id()) fail(ErrorKind::Usage, "device {} is added twice", device->name());
  }
  devices_.push_back(std::move(device));
}

Device& DeviceSet::get(const DeviceId& id) {
  for (auto& d : devices_) {
    if (d->id() == id) return *d;
  }
  fail(ErrorKind::Usage, "device {} is not among the devices of this run", id.str());
}

std::vector<Device*> DeviceSet::all() {
  std::vector<Device*> out;
  for (auto& d : devices_) out.push_back(d.get());
  return out;
}

std::vector<std::string> budget_warnings(const std::vector<DeviceSpec>& specs) {
  uint64_t cpu_budgets = 0;
  std::string named;
  for (const DeviceSpec& s : specs) {
    if (s.id.type != DeviceType::Cpu || s.budget == Allocator::kUnlimited) continue;
    cpu_budgets += s.budget;
    named += (named.empty() ? "" : " + ") + fmt::format("{}={}", s.id.str(), format_bytes(s.budget));
  }
  const uint64_t memory = meminfo_bytes("MemTotal:");
  if (memory == 0 || cpu_budgets <= memory) return {};
  return {
      fmt::format("the CPU budgets ({}) add up to {}, more than this machine's {} of memory: a plan that "
                  "uses them will swap or be killed; give budgets that fit",
                  named, format_bytes(cpu_budgets), format_bytes(memory))};
}

}  // namespace ferry
