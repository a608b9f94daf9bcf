// `ferry devices`: every device this machine has, with its memory, the budget it gets when none is
// given, and what its kernels can use; and the kinds this machine or build cannot run, and why.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "backends/registry.h"
#include "cli/commands.h"
#include "core/device.h"

namespace ferry::cli {

namespace {

std::string bytes_or_unknown(uint64_t bytes) {
  return bytes == 0 ? "?" : format_bytes(static_cast<size_t>(bytes));
}

std::string budget_text(size_t budget) {
  return budget == Allocator::kUnlimited ? "unlimited" : format_bytes(budget);
}

int run_devices(bool json) {
  const DeviceListing listing = list_devices();
  if (json) {
    nlohmann::json out;
    out["devices"] = nlohmann::json::array();
    for (const DeviceDescription& d : listing.devices) {
      nlohmann::json j = {{"id", d.id.str()},
                          {"name", d.name},
                          {"kind", d.kind},
                          {"total_bytes", d.total_bytes},
                          {"free_bytes", d.free_bytes},
                          {"free_measured", d.free_measured}};
      j["default_budget"] =
          d.default_budget == Allocator::kUnlimited ? nlohmann::json() : nlohmann::json(d.default_budget);
      for (const auto& [key, value] : d.features) j["features"][key] = value;
      out["devices"].push_back(j);
    }
    out["unavailable"] = listing.unavailable;
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{:<10} {:<40} {:<11} {:>11} {:>11} {:>14}  {}\n", "device", "name", "kind", "total", "free",
             "default budget", "features");
  for (const DeviceDescription& d : listing.devices) {
    std::string features;
    for (const auto& [key, value] : d.features)
      features += fmt::format("{}{}={}", features.empty() ? "" : " ", key, value);
    fmt::print("{:<10} {:<40} {:<11} {:>11} {:>11} {:>14}  {}\n", d.id.str(), d.name.substr(0, 40), d.kind,
               bytes_or_unknown(d.total_bytes),
               d.free_bytes == 0 ? "?" : format_bytes(static_cast<size_t>(d.free_bytes)) + (d.free_measured ? "" : "*"),
               budget_text(d.default_budget), features);
  }
  const bool unmeasured = std::any_of(listing.devices.begin(), listing.devices.end(),
                                      [](const DeviceDescription& d) { return d.free_bytes != 0 && !d.free_measured; });
  if (unmeasured) fmt::print("* the heap's size: the driver does not report free memory (no VK_EXT_memory_budget)\n");
  fmt::print(
      "\nUse them with --devices, e.g. --devices vulkan:0=6GiB,cpu:0; vulkan:N.K is partition K of vulkan:N (its own "
      "queue, budget and allocations).\n");
  for (const std::string& why : listing.unavailable) fmt::print("unavailable: {}\n", why);
  return 0;
}

}  // namespace

Runner add_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List this machine's devices: memory, default budget, features");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  return [json] { return run_devices(*json); };
}

}  // namespace ferry::cli
