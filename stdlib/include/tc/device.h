// Where a tensor's storage lives: the CPU or a CUDA device.
#pragma once
#include <string>
#include <string_view>

namespace tc {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; 0 for the CPU
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;                 // "cpu", "cuda:0"
  static Device parse(std::string_view s);  // "cpu", "cuda", "cuda:1"; ValueError otherwise
};

}  // namespace tc
