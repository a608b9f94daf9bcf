#include "backends/registry.h"

#include <algorithm>

#include "backends/cpu/cpu_device.h"
#include "backends/opaque/opaque_device.h"
#include "core/error.h"

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
      {DeviceType::Opaque, [](const DeviceSpec& s,
                              int threads) { return std::make_unique<opaque::OpaqueDevice>(s.id, s.budget, threads); }},
  };
  return entries;
}

}  // namespace

bool can_create(DeviceType type) {
  const auto& r = registry();
  return std::any_of(r.begin(), r.end(), [&](const Entry& e) { return e.type == type; });
}

std::unique_ptr<Device> create_device(const DeviceSpec& spec, int threads) {
  for (const Entry& e : registry()) {
    if (e.type == spec.id.type) return e.make(spec, std::max(1, threads));
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
  for (const auto& s : specs) add(create_device(s, s.threads > 0 ? s.threads : share));
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

}  // namespace ferry
