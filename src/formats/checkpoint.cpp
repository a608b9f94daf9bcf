#include "formats/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ferry {

namespace {
// Closes a file descriptor on every exit path of open().
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat below refuses it); regular files
  // ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    fail(ErrorKind::Io, "cannot open '{}': {}", path, std::strerror(err));
  }
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    fail(ErrorKind::Io, "cannot stat '{}': {}", path, std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) fail(ErrorKind::Io, "cannot map '{}': it is a directory, not a file", path);
  if (!S_ISREG(st.st_mode)) {
    fail(ErrorKind::Io, "cannot map '{}': {}, not a regular file (weights are memory-mapped from files)", path,
         S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or other special file");
  }

  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ == 0) return file;  // mmap refuses length 0; an empty file is simply empty

  void* addr = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) {
    const int err = errno;
    fail(ErrorKind::Io, "cannot map '{}' ({} bytes): {}", path, file->size_, std::strerror(err));
  }
  file->data_ = static_cast<const uint8_t*>(addr);
  file->mapped_ = true;
  return file;
}

void MappedFile::release_pages(const void* data, size_t bytes) const {
  if (!mapped_ || bytes == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t end = (begin + bytes) / page * page;
  const auto lo = reinterpret_cast<uintptr_t>(data_);
  if (first >= end || first < lo || end > lo + size_) return;
  // Advice only: on failure the pages simply stay resident.
  (void)::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(std::string name, std::vector<uint8_t> bytes) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = std::move(name);
  file->owned_ = std::move(bytes);
  file->size_ = file->owned_.size();
  file->data_ = file->size_ == 0 ? nullptr : file->owned_.data();
  return file;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Tensor TensorRecord::view() const {
  if (!file) fail(ErrorKind::Internal, "tensor record '{}' has no file", name);
  // Storage takes a mutable pointer; the pages are mapped read-only, so weights must never be
  // written through this view.
  auto storage = Storage::view(const_cast<uint8_t*>(data), nbytes, std::shared_ptr<const void>(file));
  return Tensor::view(std::move(storage), 0, dtype, shape, name);
}

void TensorSet::add(TensorRecord record) {
  const auto found = index_.find(record.name);
  if (found != index_.end()) {
    const TensorRecord& first = records_[found->second];
    const std::string first_file = first.file ? first.file->path() : std::string("?");
    const std::string second_file = record.file ? record.file->path() : std::string("?");
    if (first_file == second_file) {
      fail(ErrorKind::Format, "{}: tensor '{}' appears twice; a checkpoint must name each tensor once", first_file,
           record.name);
    }
    fail(ErrorKind::Format,
         "tensor '{}' appears in both '{}' and '{}'; a checkpoint must name each tensor once (is a stale shard left "
         "in the directory?)",
         record.name, first_file, second_file);
  }
  index_.emplace(record.name, records_.size());
  records_.push_back(std::move(record));
}

const TensorRecord* TensorSet::find(const std::string& name) const {
  const auto found = index_.find(name);
  return found == index_.end() ? nullptr : &records_[found->second];
}

}  // namespace ferry
