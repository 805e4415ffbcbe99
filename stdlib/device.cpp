// Device names.
#include "tc/device.h"

#include <string>

#include "tc/error.h"

namespace tc {

std::string Device::str() const {
  return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
}

Device Device::parse(std::string_view s) {
  if (s == "cpu") return {DeviceType::CPU, 0};
  if (s == "cuda") return {DeviceType::CUDA, 0};
  if (s.substr(0, 5) == "cuda:" && s.size() > 5) {
    int idx = 0;
    for (char c : s.substr(5)) {
      if (c < '0' || c > '9') TC_FAIL(ValueError, "invalid device string '%.*s'", (int)s.size(), s.data());
      idx = idx * 10 + (c - '0');
    }
    return {DeviceType::CUDA, idx};
  }
  TC_FAIL(ValueError, "invalid device string '%.*s' (expected \"cpu\", \"cuda\" or \"cuda:N\")",
          (int)s.size(), s.data());
}

}  // namespace tc
