#include "core/error.h"

namespace ferry {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Io:
      return "I/O error";
    case ErrorKind::Format:
      return "format error";
    case ErrorKind::Config:
      return "config error";
    case ErrorKind::Shape:
      return "shape error";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::OutOfMemory:
      return "out of memory";
    case ErrorKind::DeviceMismatch:
      return "device mismatch";
    case ErrorKind::Usage:
      return "usage error";
    case ErrorKind::Internal:
      return "internal error";
  }
  return "error";
}

}  // namespace ferry
