// Typed access to op arguments.
#include "tc/value.h"

namespace tc {

#define TC_VALUE_GET(method, T, what)                                   \
  const T& Value::method() const {                                      \
    TC_ASSERT(std::holds_alternative<T>(d_), "Value is not a " what);   \
    return std::get<T>(d_);                                             \
  }
TC_VALUE_GET(tensor, Tensor, "Tensor")
TC_VALUE_GET(tensors, TensorList, "Tensor[]")
TC_VALUE_GET(ints, IntList, "int[]")
TC_VALUE_GET(floats, FloatList, "float[]")
TC_VALUE_GET(str, std::string, "string")
#undef TC_VALUE_GET

bool Value::to_bool() const {
  if (is_bool()) return std::get<bool>(d_);
  if (is_int()) return std::get<int64_t>(d_) != 0;
  TC_ASSERT(is_double(), "Value is not a bool");
  return std::get<double>(d_) != 0;
}
int64_t Value::to_int() const {
  if (is_int()) return std::get<int64_t>(d_);
  TC_ASSERT(is_bool(), "Value is not an int");
  return std::get<bool>(d_);
}
double Value::to_double() const {
  if (is_double()) return std::get<double>(d_);
  if (is_int()) return (double)std::get<int64_t>(d_);
  TC_ASSERT(is_bool(), "Value is not a number");
  return std::get<bool>(d_);
}
DType Value::dtype() const {
  TC_ASSERT(is_dtype(), "Value is not a dtype");
  return std::get<DType>(d_);
}
Device Value::device() const {
  TC_ASSERT(is_device(), "Value is not a device");
  return std::get<Device>(d_);
}

}  // namespace tc
