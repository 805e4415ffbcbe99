// Value: one argument or result of an op (PyTorch's IValue), and Stack, a list of them.
// Ops take their arguments as a Stack in schema order, defaults already filled in.
#pragma once
#include <string>
#include <variant>
#include <vector>

#include "tc/error.h"
#include "tc/tensor.h"

namespace tc {

using IntList = std::vector<int64_t>;
using FloatList = std::vector<double>;
using TensorList = std::vector<Tensor>;

class Value {
 public:
  using Data = std::variant<std::monostate, Tensor, TensorList, bool, int64_t, double, IntList,
                            FloatList, std::string, DType, Device>;
  Value() = default;
  Value(Tensor t) : d_(std::move(t)) {}
  Value(TensorList t) : d_(std::move(t)) {}
  Value(bool b) : d_(b) {}
  Value(int v) : d_((int64_t)v) {}
  Value(int64_t v) : d_(v) {}
  Value(double v) : d_(v) {}
  Value(IntList v) : d_(std::move(v)) {}
  Value(FloatList v) : d_(std::move(v)) {}
  Value(std::string s) : d_(std::move(s)) {}
  Value(const char* s) : d_(std::string(s)) {}
  Value(DType t) : d_(t) {}
  Value(Device d) : d_(d) {}

  bool is_none() const { return std::holds_alternative<std::monostate>(d_); }
  bool is_tensor() const { return std::holds_alternative<Tensor>(d_); }
  bool is_tensor_list() const { return std::holds_alternative<TensorList>(d_); }
  bool is_bool() const { return std::holds_alternative<bool>(d_); }
  bool is_int() const { return std::holds_alternative<int64_t>(d_); }
  bool is_double() const { return std::holds_alternative<double>(d_); }
  bool is_number() const { return is_int() || is_double() || is_bool(); }
  bool is_int_list() const { return std::holds_alternative<IntList>(d_); }
  bool is_float_list() const { return std::holds_alternative<FloatList>(d_); }
  bool is_string() const { return std::holds_alternative<std::string>(d_); }
  bool is_dtype() const { return std::holds_alternative<DType>(d_); }
  bool is_device() const { return std::holds_alternative<Device>(d_); }

  // Accessors assert the type (the binder has already checked it against the schema).
  const Tensor& tensor() const;
  const TensorList& tensors() const;
  bool to_bool() const;
  int64_t to_int() const;      // int (or bool)
  double to_double() const;    // any number
  const IntList& ints() const;
  const FloatList& floats() const;
  const std::string& str() const;
  DType dtype() const;
  Device device() const;
  const Data& data() const { return d_; }

 private:
  Data d_;
};

using Stack = std::vector<Value>;

}  // namespace tc
