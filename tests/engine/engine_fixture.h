// Generated tiny checkpoints for the engine tests (tools/tiny_model, deterministic by seed).
#pragma once

#include <string>

#include "../../tools/tiny_model/generate.h"
#include "backends/cpu/cpu_device.h"
#include "common/temp_dir.h"
#include "core/device.h"
#include "engine/checkpoint.h"
#include "engine/session.h"
#include "engine/weight_loader.h"

namespace ferry::testing {

inline void make_model(const std::string& dir, tiny::Arch arch, const std::string& format, uint64_t seed,
                       DType dtype = DType::F32, int64_t layers = 2) {
  tiny::Options o;
  o.arch = arch;
  o.out_dir = dir;
  o.format = format;
  o.seed = seed;
  o.dtype = dtype;
  o.layers = layers;
  o.threads = 1;
  tiny::write_tiny_model(o);
}

// One model loaded on one device.
struct SingleDevice {
  Checkpoint ckpt;
  cpu::CpuDevice device;
  Placement placement;
  WeightStore weights;
  SingleDevice(const std::string& path, int threads = 2)
      : ckpt(open_checkpoint(path)), device(DeviceId{DeviceType::Cpu, 0}, Allocator::kUnlimited, threads) {
    placement = Placement::single(device);
    load_weights(ckpt, placement, weights);
  }
};

}  // namespace ferry::testing
