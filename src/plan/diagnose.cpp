// Why a plan does not fit and what would: each alternative is planned for real, not guessed.
#include <fmt/format.h>

#include "core/error.h"
#include "plan/strategy.h"

namespace ferry {

namespace {

bool fits_with(const ModelSpec& spec, const PlanRequest& request) {
  try {
    return make_plan(spec, request).fits();
  } catch (const Error&) {
    return false;
  }
}

double bytes_per_element(DType d) {
  const auto& t = dtype_traits(d);
  return static_cast<double>(t.block_bytes) / static_cast<double>(t.block_size);
}

uint64_t total_of(const Plan& plan) {
  uint64_t sum = 0;
  for (const auto& d : plan.devices) sum += d.total();
  return sum;
}

}  // namespace

void check_plan_fits(const Plan& plan, const ModelSpec& spec, const PlanRequest& request) {
  if (plan.fits()) return;
  std::string msg = fmt::format("the {} plan does not fit:", plan.strategy);
  uint64_t budgets = 0;
  bool all_limited = true;
  for (const auto& d : plan.devices) {
    if (d.device.budget == Allocator::kUnlimited) {
      all_limited = false;
    } else {
      budgets += d.device.budget;
    }
    if (!d.over_budget()) continue;
    msg += fmt::format(
        "\n  {} needs {} ({} weights + {} KV cache + {} workspace + {} reserve) but its budget is {}: {} over",
        d.device.id.str(), format_bytes(d.total()), format_bytes(d.weight_bytes), format_bytes(d.kv_bytes),
        format_bytes(d.workspace_bytes), format_bytes(d.reserve_bytes), format_bytes(d.device.budget),
        format_bytes(d.total() - d.device.budget));
  }
  const uint64_t need = total_of(plan);
  if (all_limited) {
    msg += fmt::format("\n  in all the model needs about {} and the devices have {}", format_bytes(need),
                       format_bytes(budgets));
  }

  std::vector<std::string> fixes;
  if (request.strategy != Strategy::Custom) {
    for (Strategy s : {Strategy::Auto, Strategy::Balanced, Strategy::Sequential, Strategy::BalancedLow0}) {
      if (s == request.strategy) continue;
      PlanRequest other = request;
      other.strategy = s;
      if (fits_with(spec, other)) fixes.push_back(fmt::format("--strategy {} fits", strategy_name(s)));
    }
  }
  // The longest context that fits, by bisection over what the model allows.
  {
    int64_t lo = 0;
    int64_t hi = request.limits.max_context - 1;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      PlanRequest shorter = request;
      shorter.limits.max_context = mid;
      if (fits_with(spec, shorter)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    if (lo > 0) fixes.push_back(fmt::format("a context of {} tokens fits (--max-context {})", lo, lo));
  }
  // Quantizing while loading, largest first (only from a float checkpoint: ferry does not requantize).
  bool float_matrices = true;
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      if (p.role != LogicalTensor::Count && dtype_traits(p.stored_dtype).is_quantized) float_matrices = false;
    }
  }
  for (const char* name : {"q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m"}) {
    const WeightQuant q = *parse_weight_quant(name);
    const auto& now = request.limits.weight_quant;
    if (!float_matrices || (now && bytes_per_element(now->base) <= bytes_per_element(q.base))) continue;
    PlanRequest smaller = request;
    smaller.limits.weight_quant = q;
    if (fits_with(spec, smaller)) {
      fixes.push_back(fmt::format("{} weights fit: run with --dtype {} (quantized while loading)", name, name));
      break;
    }
  }
  if (all_limited && need > budgets) {
    fixes.push_back(fmt::format("another device with at least {} free", format_bytes(need - budgets)));
  }
  if (fixes.empty()) fixes.push_back("larger budgets or more devices");
  msg += "\n  what would fit:";
  for (const auto& f : fixes) msg += "\n    - " + f;
  throw Error(ErrorKind::OutOfMemory, msg);
}

}  // namespace ferry
