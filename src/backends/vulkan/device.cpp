#include "backends/vulkan/device.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "backends/vulkan/lowering.h"
#include "backends/vulkan/spirv.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ferry::vulkan {

namespace {

constexpr uint64_t kStagingBytes = 16ull << 20;
constexpr uint32_t kPushWords = kBindings + 1 + kParams;  // shaders/common.glsl's push constants

Buffer* buffer_of(const Tensor& t) {
  return static_cast<Buffer*>(t.storage()->address());
}

uint32_t find_memory_type(VkPhysicalDevice physical, uint32_t allowed, VkMemoryPropertyFlags want) {
  VkPhysicalDeviceMemoryProperties props;
  vkGetPhysicalDeviceMemoryProperties(physical, &props);
  for (uint32_t i = 0; i < props.memoryTypeCount; ++i) {
    if ((allowed & (1u << i)) != 0 && (props.memoryTypes[i].propertyFlags & want) == want) return i;
  }
  return UINT32_MAX;
}

// Everything a step's tensors resolve to when it is recorded; a change means re-recording.
struct BindingKey {
  const Storage* storage = nullptr;
  size_t offset = 0;
  friend bool operator==(const BindingKey&, const BindingKey&) = default;
};

class VulkanProgram final : public Program {
 public:
  VulkanProgram(VulkanDevice& device, std::vector<Step> steps) : device_(device), steps_(std::move(steps)) {}
  ~VulkanProgram() override {
    // Freed behind whatever of this program may still run.
    VkDevice dev = device_.handle();
    VkDescriptorPool pool = descriptor_pool_;
    VkCommandBuffer commands = commands_;
    VkCommandPool command_pool = device_.command_pool();
    std::vector<Buffer*> constants = constants_;
    VulkanDevice* device = &device_;
    device_.destroy_later([=] {
      if (commands != VK_NULL_HANDLE) vkFreeCommandBuffers(dev, command_pool, 1, &commands);
      if (pool != VK_NULL_HANDLE) vkDestroyDescriptorPool(dev, pool, nullptr);
      for (Buffer* b : constants) device->release(b);
    });
  }

  // The tensors' current memory, read on the host thread when the run is queued.
  std::vector<BindingKey> keys() const {
    std::vector<BindingKey> out;
    for (const Step& s : steps_) {
      if (const auto* d = std::get_if<Dispatch>(&s)) {
        for (const Tensor* t : d->tensors) {
          if (t != nullptr) out.push_back({t->storage().get(), t->offset()});
        }
      } else {
        const auto& c = std::get<BufferCopy>(s);
        out.push_back({c.src->storage().get(), c.src->offset()});
        out.push_back({c.dst->storage().get(), c.dst->offset()});
      }
    }
    return out;
  }

  // Stream thread: records the command buffer when the tensors' memory changed, then submits it.
  void run(const std::vector<BindingKey>& keys) {
    if (commands_ == VK_NULL_HANDLE || keys != recorded_) {
      record();
      recorded_ = keys;
    }
    device_.submit(commands_);
  }

 private:
  struct Window {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize offset = 0, range = 0;
    uint32_t word_offset = 0;  // the tensor's first word inside the window
  };

  Window window(const Tensor& t) const {
    const VkPhysicalDeviceLimits& limits = device_.info().limits;
    const Buffer* b = buffer_of(t);
    const uint64_t align = std::max<uint64_t>(limits.minStorageBufferOffsetAlignment, 4);
    const uint64_t start = t.offset() / align * align;
    const uint64_t max_range = std::min<uint64_t>(limits.maxStorageBufferRange, b->size - start) / 4 * 4;
    if (t.offset() % 4 != 0 || t.offset() + t.nbytes() > start + std::max<uint64_t>(max_range, 4)) {
      fail(ErrorKind::Unsupported,
           "tensor '{}' ({} at byte {} of its buffer) does not fit one storage-buffer binding of {} (at most {} "
           "bytes); give it a device with a larger maxStorageBufferRange",
           t.name(), format_bytes(t.nbytes()), t.offset(), device_.name(), limits.maxStorageBufferRange);
    }
    return {b->buffer, start, std::max<uint64_t>(max_range, 4), static_cast<uint32_t>((t.offset() - start) / 4)};
  }

  void record() {
    VkDevice dev = device_.handle();
    size_t n_sets = 0;
    for (const Step& s : steps_) n_sets += std::holds_alternative<Dispatch>(s) ? 1 : 0;
    if (descriptor_pool_ == VK_NULL_HANDLE && n_sets > 0) {
      VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, static_cast<uint32_t>(n_sets * kBindings)};
      VkDescriptorPoolCreateInfo info{};
      info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
      info.maxSets = static_cast<uint32_t>(n_sets);
      info.poolSizeCount = 1;
      info.pPoolSizes = &size;
      check(vkCreateDescriptorPool(dev, &info, nullptr, &descriptor_pool_), "vkCreateDescriptorPool");
      std::vector<VkDescriptorSetLayout> layouts(n_sets, device_.set_layout());
      sets_.resize(n_sets);
      VkDescriptorSetAllocateInfo alloc{};
      alloc.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
      alloc.descriptorPool = descriptor_pool_;
      alloc.descriptorSetCount = static_cast<uint32_t>(n_sets);
      alloc.pSetLayouts = layouts.data();
      check(vkAllocateDescriptorSets(dev, &alloc, sets_.data()), "vkAllocateDescriptorSets");
    }
    if (commands_ == VK_NULL_HANDLE) {
      VkCommandBufferAllocateInfo alloc{};
      alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
      alloc.commandPool = device_.command_pool();
      alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      alloc.commandBufferCount = 1;
      check(vkAllocateCommandBuffers(dev, &alloc, &commands_), "vkAllocateCommandBuffers");
    } else {
      check(vkResetCommandBuffer(commands_, 0), "vkResetCommandBuffer");
    }
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    check(vkBeginCommandBuffer(commands_, &begin), "vkBeginCommandBuffer");
    const VkPhysicalDeviceLimits& limits = device_.info().limits;
    size_t set_index = 0;
    size_t constant_index = 0;
    for (const Step& s : steps_) {
      if (const auto* d = std::get_if<Dispatch>(&s)) {
        std::array<uint32_t, kPushWords> push{};
        std::array<VkDescriptorBufferInfo, kBindings> infos{};
        for (int i = 0; i < kBindings; ++i) {
          if (d->tensors[static_cast<size_t>(i)] != nullptr) {
            const Window w = window(*d->tensors[static_cast<size_t>(i)]);
            infos[static_cast<size_t>(i)] = {w.buffer, w.offset, w.range};
            push[static_cast<size_t>(i)] = w.word_offset;
          } else if (i == d->constants_binding) {
            if (constant_index == constants_.size()) {
              Buffer* c = device_.create_host_buffer(d->constants.size() * sizeof(float));
              std::memcpy(c->mapped, d->constants.data(), d->constants.size() * sizeof(float));
              constants_.push_back(c);
            }
            Buffer* c = constants_[constant_index++];
            infos[static_cast<size_t>(i)] = {c->buffer, 0, VK_WHOLE_SIZE};
          } else {
            infos[static_cast<size_t>(i)] = {device_.dummy()->buffer, 0, VK_WHOLE_SIZE};
          }
        }
        std::array<VkWriteDescriptorSet, kBindings> writes{};
        for (int i = 0; i < kBindings; ++i) {
          VkWriteDescriptorSet& w = writes[static_cast<size_t>(i)];
          w.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
          w.dstSet = sets_[set_index];
          w.dstBinding = static_cast<uint32_t>(i);
          w.descriptorCount = 1;
          w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
          w.pBufferInfo = &infos[static_cast<size_t>(i)];
        }
        vkUpdateDescriptorSets(dev, kBindings, writes.data(), 0, nullptr);
        const uint64_t max_x = limits.maxComputeWorkGroupCount[0];
        const uint64_t groups = std::max<uint64_t>(d->groups, 1);
        const uint64_t x = std::min(groups, max_x);
        const uint64_t y = (groups + x - 1) / x;
        if (y > limits.maxComputeWorkGroupCount[1] || groups > UINT32_MAX) {
          fail(ErrorKind::Unsupported, "{} needs {} workgroups, more than {} can launch", d->shader, groups,
               device_.name());
        }
        push[kBindings] = static_cast<uint32_t>(d->groups);
        std::copy(d->params.begin(), d->params.end(), push.begin() + kBindings + 1);
        vkCmdBindPipeline(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, device_.pipeline(d->shader));
        vkCmdBindDescriptorSets(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, device_.pipeline_layout(), 0, 1,
                                &sets_[set_index], 0, nullptr);
        vkCmdPushConstants(commands_, device_.pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           kPushWords * sizeof(uint32_t), push.data());
        if (d->groups > 0) vkCmdDispatch(commands_, static_cast<uint32_t>(x), static_cast<uint32_t>(y), 1);
        ++set_index;
      } else {
        const auto& c = std::get<BufferCopy>(s);
        std::vector<VkBufferCopy> regions;
        for (const auto& r : c.regions) {
          regions.push_back({c.src->offset() + r.src_offset, c.dst->offset() + r.dst_offset, r.size});
        }
        vkCmdCopyBuffer(commands_, buffer_of(*c.src)->buffer, buffer_of(*c.dst)->buffer,
                        static_cast<uint32_t>(regions.size()), regions.data());
      }
      // Every step sees everything before it: the workspace reuses memory across steps.
      VkMemoryBarrier barrier{};
      barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
      barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                              VK_ACCESS_TRANSFER_READ_BIT;
      barrier.dstAccessMask = barrier.srcAccessMask;
      const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
      vkCmdPipelineBarrier(commands_, stages, stages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
    }
    check(vkEndCommandBuffer(commands_), "vkEndCommandBuffer");
  }

  VulkanDevice& device_;
  std::vector<Step> steps_;
  VkDescriptorPool descriptor_pool_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorSet> sets_;
  std::vector<Buffer*> constants_;
  VkCommandBuffer commands_ = VK_NULL_HANDLE;
  std::vector<BindingKey> recorded_;
};

}  // namespace

double VulkanDevice::measure_read_bandwidth(size_t bytes) {
  const size_t budget_share = allocator().budget() == Allocator::kUnlimited ? bytes : allocator().budget() / 2;
  bytes = std::min({bytes, static_cast<size_t>(info_->limits.maxStorageBufferRange), budget_share}) / 1024 * 1024;
  if (bytes == 0) fail(ErrorKind::OutOfMemory, "{} has no memory left to measure its read bandwidth", name());
  const auto vec4s = static_cast<int64_t>(bytes / 16);
  Tensor source = Tensor::empty(*this, DType::F32, Shape{vec4s * 4}, "bandwidth probe");
  Tensor sink = Tensor::empty(*this, DType::F32, Shape{64}, "bandwidth probe sink");
  fill_zero(source);
  Dispatch pass;
  pass.shader = "bandwidth";
  pass.tensors[0] = &source;
  pass.tensors[1] = &sink;
  pass.params[0] = static_cast<uint32_t>(vec4s);
  pass.params[1] = std::bit_cast<uint32_t>(1.0f);  // a zero source never sums to it
  // Enough invocations to keep every memory channel busy, each reading at least 8 vec4s.
  pass.groups = std::clamp<uint64_t>(static_cast<uint64_t>(vec4s) / (64 * 8), 1, 65535);
  // Enough passes per submission (1 GiB read) that the submission's own cost does not count.
  const size_t passes = std::max<size_t>(1, (size_t{1} << 30) / bytes);
  VulkanProgram program(*this, std::vector<Step>(passes, pass));
  double best = 0;
  for (int round = 0; round < 4; ++round) {  // the first warms up: pipelines, the command buffer
    const auto start = std::chrono::steady_clock::now();
    run(program);
    synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round > 0) best = std::max(best, static_cast<double>(bytes) * static_cast<double>(passes) / s);
  }
  return best;
}

size_t VulkanDevice::default_budget(const PhysicalDeviceInfo& info, uint64_t free_memory) {
  // What the driver, other processes' growth and fragmentation need: 5% of the device, at least
  // 256 MiB, as llama.cpp and vLLM leave headroom.
  const uint64_t reserve = std::max<uint64_t>(info.total_memory / 20, 256ull << 20);
  return free_memory > reserve ? static_cast<size_t>(free_memory - reserve) : 0;
}

std::vector<DeviceDescription> describe_devices() {
  const auto instance = Instance::get();
  std::vector<DeviceDescription> out;
  for (size_t i = 0; i < instance->devices().size(); ++i) {
    const PhysicalDeviceInfo& info = instance->devices()[i];
    DeviceDescription d;
    d.id = DeviceId{DeviceType::Vulkan, static_cast<int>(i)};
    d.name = info.name;
    d.kind = info.kind;
    d.total_bytes = info.total_memory;
    d.free_bytes = instance->free_memory(i);
    d.free_measured = info.has_memory_budget;
    d.default_budget = VulkanDevice::default_budget(info, d.free_bytes);
    const auto yes_no = [](bool b) { return std::string(b ? "yes" : "no"); };
    d.features = {{"subgroup", std::to_string(info.subgroup_size)},
                  {"f16", yes_no(info.float16)},
                  {"int8", yes_no(info.int8)},
                  {"integer-dot", yes_no(info.integer_dot)},
                  {"cooperative-matrix", yes_no(info.cooperative_matrix)},
                  {"max-buffer-range", std::to_string(info.limits.maxStorageBufferRange)},
                  {"shared-memory", std::to_string(info.limits.maxComputeSharedMemorySize)}};
    out.push_back(std::move(d));
  }
  return out;
}

void resolve_default_budgets(std::vector<DeviceSpec>& specs) {
  std::shared_ptr<Instance> instance;
  for (DeviceSpec& spec : specs) {
    if (spec.id.type != DeviceType::Vulkan || spec.budget != Allocator::kUnlimited) continue;
    try {
      if (!instance) instance = Instance::get();
    } catch (const Error& e) {
      fail(ErrorKind::Unsupported,
           "{} has no budget, and its free memory cannot be read here: {}; give it a budget ({}=24GiB) to plan for "
           "another machine",
           spec.id.str(), e.what(), spec.id.str());
    }
    const auto& devices = instance->devices();
    if (spec.id.index < 0 || static_cast<size_t>(spec.id.index) >= devices.size()) {
      fail(ErrorKind::Unsupported,
           "{} has no budget, and this machine has {} Vulkan device(s) to read free memory from (`ferry devices` lists "
           "them); give it a budget ({}=24GiB) to plan for another machine",
           spec.id.str(), devices.size(), spec.id.str());
    }
    const auto index = static_cast<size_t>(spec.id.index);
    size_t available = VulkanDevice::default_budget(devices[index], instance->free_memory(index));
    size_t sharing = 0;
    for (const DeviceSpec& other : specs) {
      if (other.id.type != DeviceType::Vulkan || other.id.index != spec.id.index) continue;
      if (other.budget == Allocator::kUnlimited) {
        ++sharing;
      } else {
        available = other.budget < available ? available - other.budget : 0;
      }
    }
    const size_t share = available / sharing;
    for (DeviceSpec& other : specs) {
      if (other.id.type == DeviceType::Vulkan && other.id.index == spec.id.index &&
          other.budget == Allocator::kUnlimited)
        other.budget = share;
    }
  }
}

std::unique_ptr<Device> make_device(const DeviceSpec& spec) {
  size_t budget = spec.budget;
  if (budget == Allocator::kUnlimited) {
    const auto instance = Instance::get();
    if (spec.id.index >= 0 && static_cast<size_t>(spec.id.index) < instance->devices().size()) {
      const auto index = static_cast<size_t>(spec.id.index);
      budget = VulkanDevice::default_budget(instance->devices()[index], instance->free_memory(index));
    }
  }
  return std::make_unique<VulkanDevice>(spec.id, budget);
}

VulkanDevice::VulkanDevice(DeviceId id, size_t budget_bytes, DeviceOptions options)
    : Device(id, budget_bytes), instance_(Instance::get()), options_(options), stream_(id.str()) {
  const auto& devices = instance_->devices();
  if (id.index < 0 || static_cast<size_t>(id.index) >= devices.size()) {
    fail(ErrorKind::Unsupported, "{}: this machine has {} Vulkan device(s) with compute{}; `ferry devices` lists them",
         id.str(), devices.size(),
         devices.empty() ? " (install your GPU's Vulkan driver, or Mesa's: apt-get install mesa-vulkan-drivers)" : "");
  }
  physical_index_ = static_cast<size_t>(id.index);
  info_ = &devices[physical_index_];

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{};
  queue.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  queue.queueFamilyIndex = info_->compute_queue_family;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  VkDeviceCreateInfo create{};
  create.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  create.queueCreateInfoCount = 1;
  create.pQueueCreateInfos = &queue;
  check(vkCreateDevice(info_->handle, &create, nullptr, &device_), "vkCreateDevice");
  vkGetDeviceQueue(device_, info_->compute_queue_family, 0, &queue_);

  VkCommandPoolCreateInfo pool{};
  pool.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool.queueFamilyIndex = info_->compute_queue_family;
  check(vkCreateCommandPool(device_, &pool, nullptr, &command_pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  alloc.commandPool = command_pool_;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(device_, &alloc, &transfer_commands_), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fence{};
  fence.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  check(vkCreateFence(device_, &fence, nullptr, &fence_), "vkCreateFence");

  std::array<VkDescriptorSetLayoutBinding, kBindings> bindings{};
  for (uint32_t i = 0; i < kBindings; ++i) {
    bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  }
  VkDescriptorSetLayoutCreateInfo layout{};
  layout.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  layout.bindingCount = kBindings;
  layout.pBindings = bindings.data();
  check(vkCreateDescriptorSetLayout(device_, &layout, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushWords * sizeof(uint32_t)};
  VkPipelineLayoutCreateInfo pipeline_layout{};
  pipeline_layout.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  pipeline_layout.setLayoutCount = 1;
  pipeline_layout.pSetLayouts = &set_layout_;
  pipeline_layout.pushConstantRangeCount = 1;
  pipeline_layout.pPushConstantRanges = &push;
  check(vkCreatePipelineLayout(device_, &pipeline_layout, nullptr, &pipeline_layout_), "vkCreatePipelineLayout");

  // Memory: device-local, preferring a type the host can map too.
  VkBufferCreateInfo probe{};
  probe.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  probe.size = 256;
  probe.usage =
      VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VkBuffer probe_buffer = VK_NULL_HANDLE;
  check(vkCreateBuffer(device_, &probe, nullptr, &probe_buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, probe_buffer, &req);
  vkDestroyBuffer(device_, probe_buffer, nullptr);
  const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t type = options_.map_memory
                      ? find_memory_type(info_->handle, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host)
                      : UINT32_MAX;
  device_memory_mapped_ = type != UINT32_MAX;
  if (type == UINT32_MAX)
    type = find_memory_type(info_->handle, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (type == UINT32_MAX) type = find_memory_type(info_->handle, req.memoryTypeBits, 0);
  device_memory_type_ = type;
  host_memory_type_ = find_memory_type(info_->handle, req.memoryTypeBits, host);
  if (device_memory_type_ == UINT32_MAX || host_memory_type_ == UINT32_MAX) {
    fail(ErrorKind::Unsupported, "{} ({}) has no memory type ferry can use for storage buffers", id.str(), info_->name);
  }
  dummy_ = create_buffer(256, device_memory_type_, false);
  staging_ = create_host_buffer(kStagingBytes);
}

VulkanDevice::~VulkanDevice() {
  try {
    stream_.synchronize();
  } catch (...) {  // nobody is left to report it to
  }
  vkDeviceWaitIdle(device_);
  for (auto& [name, p] : pipelines_) {
    vkDestroyPipeline(device_, p.second, nullptr);
    vkDestroyShaderModule(device_, p.first, nullptr);
  }
  release(dummy_);
  release(staging_);
  vkDestroyPipelineLayout(device_, pipeline_layout_, nullptr);
  vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
  vkDestroyFence(device_, fence_, nullptr);
  vkDestroyCommandPool(device_, command_pool_, nullptr);
  vkDestroyDevice(device_, nullptr);
}

DeviceMemory VulkanDevice::memory() const {
  return {info_->total_memory, instance_->free_memory(physical_index_)};
}

bool VulkanDevice::supports(Op op, std::span<const DType> input_dtypes) const {
  return vulkan::supports(op, input_dtypes);
}

std::unique_ptr<Program> VulkanDevice::compile(std::span<const BoundOp> ops) {
  std::vector<Step> steps;
  for (const BoundOp& op : ops) {
    for (Step& s : lower(op)) steps.push_back(std::move(s));
  }
  return std::make_unique<VulkanProgram>(*this, std::move(steps));
}

void VulkanDevice::run(Program& program) {
  auto* p = static_cast<VulkanProgram*>(&program);
  stream_.submit([p, keys = p->keys()] { p->run(keys); });
}

Buffer* VulkanDevice::create_buffer(uint64_t bytes, uint32_t memory_type, bool map) {
  auto b = std::make_unique<Buffer>();
  b->size = std::max<uint64_t>(bytes, 4);
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = b->size;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (vkCreateBuffer(device_, &info, nullptr, &b->buffer) != VK_SUCCESS) return nullptr;
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b->buffer, &req);
  VkMemoryAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  alloc.allocationSize = req.size;
  b->allocation_size = req.size;
  alloc.memoryTypeIndex = memory_type;
  if (vkAllocateMemory(device_, &alloc, nullptr, &b->memory) != VK_SUCCESS) {
    vkDestroyBuffer(device_, b->buffer, nullptr);
    return nullptr;
  }
  check(vkBindBufferMemory(device_, b->buffer, b->memory, 0), "vkBindBufferMemory");
  if (map) check(vkMapMemory(device_, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped), "vkMapMemory");
  return b.release();
}

Buffer* VulkanDevice::create_host_buffer(uint64_t bytes) {
  Buffer* b = create_buffer(bytes, host_memory_type_, true);
  if (b == nullptr)
    fail(ErrorKind::OutOfMemory, "{} could not allocate {} of host-visible memory", name(), format_bytes(bytes));
  return b;
}

void VulkanDevice::release(Buffer* b) {
  if (b == nullptr) return;
  if (b->budgeted) allocated_bytes_.fetch_sub(b->allocation_size);
  if (b->mapped != nullptr) vkUnmapMemory(device_, b->memory);
  vkDestroyBuffer(device_, b->buffer, nullptr);
  vkFreeMemory(device_, b->memory, nullptr);
  delete b;
}

void* VulkanDevice::allocate_memory(size_t bytes) {
  Buffer* b = create_buffer(bytes, device_memory_type_, device_memory_mapped_);
  if (b != nullptr) {
    b->budgeted = true;
    allocated_bytes_.fetch_add(b->allocation_size);
  }
  return b;
}

void VulkanDevice::free_memory(void* address, size_t) {
  // The memory may still be read by queued work: free it behind that work.
  auto* b = static_cast<Buffer*>(address);
  destroy_later([this, b] { release(b); });
}

void VulkanDevice::destroy_later(std::function<void()> cleanup) {
  stream_.submit_always(std::move(cleanup));
}

void VulkanDevice::submit(VkCommandBuffer commands) {
  VkSubmitInfo info{};
  info.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  info.commandBufferCount = 1;
  info.pCommandBuffers = &commands;
  check(vkQueueSubmit(queue_, 1, &info, fence_), "vkQueueSubmit");
  check(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(vkResetFences(device_, 1, &fence_), "vkResetFences");
}

void VulkanDevice::run_transfer(const std::function<void(VkCommandBuffer)>& fn) {
  check(vkResetCommandBuffer(transfer_commands_, 0), "vkResetCommandBuffer");
  VkCommandBufferBeginInfo begin{};
  begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(transfer_commands_, &begin), "vkBeginCommandBuffer");
  fn(transfer_commands_);
  check(vkEndCommandBuffer(transfer_commands_), "vkEndCommandBuffer");
  submit(transfer_commands_);
}

void VulkanDevice::write(const Tensor& dst, const void* src) {
  Buffer* b = buffer_of(dst);
  const uint64_t at = dst.offset();
  const uint64_t n = dst.nbytes();
  stream_.submit([this, b, at, n, src] {
    if (b->mapped != nullptr) {
      std::memcpy(static_cast<char*>(b->mapped) + at, src, n);
      return;
    }
    for (uint64_t done = 0; done < n; done += kStagingBytes) {
      const uint64_t chunk = std::min(kStagingBytes, n - done);
      std::memcpy(staging_->mapped, static_cast<const char*>(src) + done, chunk);
      run_transfer([&](VkCommandBuffer c) {
        VkBufferCopy region{0, at + done, chunk};
        vkCmdCopyBuffer(c, staging_->buffer, b->buffer, 1, &region);
      });
    }
  });
}

void VulkanDevice::read(const Tensor& src, void* dst) {
  Buffer* b = buffer_of(src);
  const uint64_t at = src.offset();
  const uint64_t n = src.nbytes();
  stream_.submit([this, b, at, n, dst] {
    if (b->mapped != nullptr) {
      std::memcpy(dst, static_cast<const char*>(b->mapped) + at, n);
      return;
    }
    for (uint64_t done = 0; done < n; done += kStagingBytes) {
      const uint64_t chunk = std::min(kStagingBytes, n - done);
      run_transfer([&](VkCommandBuffer c) {
        VkBufferCopy region{at + done, 0, chunk};
        vkCmdCopyBuffer(c, b->buffer, staging_->buffer, 1, &region);
      });
      std::memcpy(static_cast<char*>(dst) + done, staging_->mapped, chunk);
    }
  });
}

bool VulkanDevice::copy_from(const Tensor& src, const Tensor& dst) {
  if (src.storage() == nullptr || src.storage()->device() != this) return false;
  Buffer* from = buffer_of(src);
  Buffer* to = buffer_of(dst);
  const VkBufferCopy region{src.offset(), dst.offset(), dst.nbytes()};
  stream_.submit([this, from, to, region] {
    run_transfer([&](VkCommandBuffer c) { vkCmdCopyBuffer(c, from->buffer, to->buffer, 1, &region); });
  });
  return true;
}

void VulkanDevice::fill_zero(const Tensor& dst) {
  Buffer* b = buffer_of(dst);
  const uint64_t at = dst.offset();
  const uint64_t n = dst.nbytes();
  stream_.submit([this, b, at, n] {
    if (b->mapped != nullptr) {
      std::memset(static_cast<char*>(b->mapped) + at, 0, n);
    } else if (at % 4 == 0 && n % 4 == 0) {
      run_transfer([&](VkCommandBuffer c) { vkCmdFillBuffer(c, b->buffer, at, n, 0); });
    } else {
      std::vector<char> zeros(std::min(n, kStagingBytes), 0);
      for (uint64_t done = 0; done < n; done += kStagingBytes) {
        const uint64_t chunk = std::min(kStagingBytes, n - done);
        std::memcpy(staging_->mapped, zeros.data(), chunk);
        run_transfer([&](VkCommandBuffer c) {
          VkBufferCopy region{0, at + done, chunk};
          vkCmdCopyBuffer(c, staging_->buffer, b->buffer, 1, &region);
        });
      }
    }
  });
}

VkPipeline VulkanDevice::pipeline(std::string_view shader) {
  if (auto it = pipelines_.find(shader); it != pipelines_.end()) return it->second.second;
  const std::span<const uint32_t> code = spirv(shader);
  if (code.empty()) fail(ErrorKind::Internal, "the Vulkan backend has no shader '{}'", shader);
  VkShaderModuleCreateInfo module_info{};
  module_info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  module_info.codeSize = code.size_bytes();
  module_info.pCode = code.data();
  VkShaderModule module = VK_NULL_HANDLE;
  check(vkCreateShaderModule(device_, &module_info, nullptr, &module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.layout = pipeline_layout_;
  VkPipeline pipeline = VK_NULL_HANDLE;
  const VkResult made = vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &pipeline);
  if (made != VK_SUCCESS) vkDestroyShaderModule(device_, module, nullptr);
  check(made, "vkCreateComputePipelines");
  pipelines_.emplace(std::string(shader), std::make_pair(module, pipeline));
  return pipeline;
}

}  // namespace ferry::vulkan
