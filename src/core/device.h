// The device interface: what the runtime knows of every backend, and nothing more. A device is
// memory with a budget, a stream of work that runs in order (asynchronously where the backend can),
// and the kernels of its backend. Backends live in src/backends/<kind>/ and implement this class;
// the runtime, the scheduler and the executor talk to devices only through it. There is no current
// device, no global allocator and no global thread count.
//
// Device memory need not be host-addressable: code outside a backend never dereferences it, and
// moves data only with write(), read() and copy_from(). Work is queued: write, read, copy_from,
// fill_zero and run return before the work is done; record() marks a point in a device's stream,
// wait() makes a device's later work wait for another device's event, synchronize() waits on the
// host and rethrows the first error the queued work raised.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace ferry {

enum class Op : uint8_t;  // graph/op.h
struct Node;              // graph/graph.h
class Storage;
class Tensor;

// Cpu: the CPU backend (backends/cpu). Opaque: a conformance device whose memory is hidden from
// everything outside its backend (backends/opaque); it runs the CPU kernels on memory nobody else
// can read, and counts the transfers it is asked for. Vulkan: a GPU through Vulkan compute
// (backends/vulkan), in builds that have it. Cuda: a planning target only (`ferry plan --devices
// cuda:0=24GiB,...`); no device of that kind can be created.
enum class DeviceType : uint8_t { Cpu, Opaque, Cuda, Vulkan };

// A value type naming a device: "cpu:0", "cpu:1", "opaque:0", "cuda:0", "vulkan:0", or "vulkan:0.1"
// (logical partition 1 of Vulkan device 0: its own queue, budget and allocations, so one GPU can be
// split into budgeted devices). Comparable and hashable.
struct DeviceId {
  DeviceType type = DeviceType::Cpu;
  int index = 0;
  int part = -1;  // the logical partition of a Vulkan device; -1: the whole device

  static DeviceId parse(std::string_view text);  // throws Error(Usage) with the accepted forms
  std::string str() const;
  friend bool operator==(const DeviceId&, const DeviceId&) = default;
  friend auto operator<=>(const DeviceId&, const DeviceId&) = default;
};

// A device's budget accounting: bytes charged against a budget, live and peak. Memory itself comes
// from the device's backend (Device::allocate); allocations are charged rounded up to kAlignment.
class Allocator {
 public:
  static constexpr size_t kUnlimited = SIZE_MAX;
  static constexpr size_t kAlignment = 64;

  Allocator(std::string device_name, size_t budget);

  static size_t rounded(size_t bytes) {
    return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  // Throws Error(OutOfMemory) naming the device, the request (`what`), what is live and the budget.
  void charge(size_t bytes, std::string_view what);
  void refund(size_t bytes);

  size_t budget() const { return budget_; }
  size_t live() const { return live_.load(); }
  size_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  std::string device_name_;
  size_t budget_;
  std::atomic<size_t> live_{0};
  std::atomic<size_t> peak_{0};
};

struct DeviceMemory {
  size_t total = 0;  // bytes the device has
  size_t free = 0;   // bytes free now (the default budget's source)
};

// A point in a device's stream: done once everything queued before it has run.
class Event {
 public:
  virtual ~Event() = default;
  virtual void wait() const = 0;  // blocks the calling thread until then
};

// One op of a split, bound to its tensors on one device. The pointers stay valid for the life of
// the Program compiled from it; the tensors they point to keep their memory from run to run, except
// graph inputs supplied on the device, whose handle a caller may change between runs (a backend
// that records addresses must check those when it runs).
struct BoundOp {
  const Node* node = nullptr;  // the op, its parameters and names
  std::vector<const Tensor*> inputs;
  const Tensor* output = nullptr;
};

// A split compiled for one device: what a backend prepares once and replays every step.
class Program {
 public:
  virtual ~Program() = default;
};

class Device {
 public:
  Device(DeviceId id, size_t budget_bytes);
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceId& id() const { return id_; }
  std::string name() const { return id_.str(); }
  Allocator& allocator() { return allocator_; }
  const Allocator& allocator() const { return allocator_; }

  // Memory charged against the budget (Error(OutOfMemory) naming `what` when it does not fit).
  std::shared_ptr<Storage> allocate(size_t bytes, const std::string& what);
  // Host memory someone else owns (a memory-mapped checkpoint's tensor) used in place as this
  // device's memory, charged against its budget while the storage lives; `keep_alive` keeps the
  // owner alive. Only for host-addressable devices (Error(Internal) otherwise).
  std::shared_ptr<Storage> adopt(void* data, size_t bytes, std::shared_ptr<const void> keep_alive,
                                 const std::string& what);

  // Whether its memory is host memory that kernels elsewhere may read (CPU devices).
  virtual bool host_addressable() const = 0;
  virtual DeviceMemory memory() const = 0;
  virtual int threads() const = 0;  // worker threads computing for this device
  // Bytes this device's backend holds for its live allocations, with the driver's own padding and
  // alignment: at least what the budget is charged. The backends that allocate exactly what they
  // are asked report the allocator's live bytes.
  virtual uint64_t allocated_bytes() const { return allocator().live(); }
  // Weights a backend keeps in a layout of its own (Layout::Packed): the same bytes reordered for
  // its kernels, so the plan's count of them holds. Whether this device repacks a weight of this
  // dtype and shape (none by default): such a weight is copied onto the device, not used in place
  // from a mapped checkpoint, then repack_weight reorders it in place and returns it marked
  // Packed. Synchronous.
  virtual bool repacks_weight(DType /*dtype*/, const Shape& /*shape*/) const { return false; }
  virtual Tensor repack_weight(const Tensor& weight);
  // Whether the device's kernels run `op` with these input dtypes (asked by the scheduler).
  virtual bool supports(Op op, std::span<const DType> input_dtypes) const = 0;
  // Prepares a split for repeated runs. Every tensor is on this device.
  virtual std::unique_ptr<Program> compile(std::span<const BoundOp> ops) = 0;

  // Queued work, run in order on this device's stream.
  virtual void run(Program& program) = 0;
  // Host -> device: `src` holds dst.nbytes() bytes and stays valid until the write is done.
  virtual void write(const Tensor& dst, const void* src) = 0;
  // Device -> host: `dst` holds src.nbytes() bytes and stays valid until the read is done.
  virtual void read(const Tensor& src, void* dst) = 0;
  // `src` on another device into `dst` on this one, directly. False (nothing queued) when this pair
  // has no direct path: the caller then stages the bytes through host memory. The caller orders it
  // after the source's producer (wait on its event).
  virtual bool copy_from(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill_zero(const Tensor& dst) = 0;
  virtual std::shared_ptr<const Event> record() = 0;
  // This device's work queued after this call waits until `event` is done.
  virtual void wait(std::shared_ptr<const Event> event) = 0;
  // Blocks until all queued work is done; rethrows the first error it raised (the work queued
  // after a failure is skipped, events still complete).
  virtual void synchronize() = 0;

 protected:
  // Backend memory of `bytes` (aligned to Allocator::kAlignment); nullptr when the backend has none.
  // The address may be anything the backend can read back (need not be host-addressable).
  virtual void* allocate_memory(size_t bytes) = 0;
  virtual void free_memory(void* address, size_t bytes) = 0;

 private:
  friend class Storage;
  DeviceId id_;
  Allocator allocator_;
};

// Parses "1.5GiB", "512MiB", "6GB", "1024" (bytes). Throws Error(Usage).
size_t parse_byte_size(std::string_view text);
std::string format_bytes(size_t bytes);  // "1.50 GiB"

struct DeviceSpec {
  DeviceId id;
  size_t budget = Allocator::kUnlimited;
  int threads = 0;  // 0: decided by the caller
};

// Parses "cpu:0=6GiB,cpu:1=6GiB" or "cpu:0,cpu:1" (budgets optional), each entry optionally ending
// in "@N" for that device's worker threads ("cpu:0=6GiB@2"). Duplicate ids are an error.
std::vector<DeviceSpec> parse_device_list(std::string_view text);

// The devices to use when none are given: one CPU device per NUMA node, each with its node's
// memory as budget (read from /sys/devices/system/node), or one unlimited cpu:0 when that is
// unavailable.
std::vector<DeviceSpec> default_devices();

// "cpu:0=6GiB@2,cpu:1": the inverse of parse_device_list (unlimited budgets and default threads omitted).
std::string format_device_list(const std::vector<DeviceSpec>& specs);

}  // namespace ferry

template <>
struct std::hash<ferry::DeviceId> {
  size_t operator()(const ferry::DeviceId& d) const noexcept {
    return std::hash<int>()((static_cast<int>(d.type) * 1000003 + d.index) * 4099 + d.part);
  }
};
