// The op registry: the Op enum and schemas expanded from ops.def, argument binding, meta rules
// and eager dispatch.
//
//   using namespace tc;
//   Tensor a = Tensor::empty({2, 3}, DType::Float32), b = ...;
//   Stack out = call(Op::add, bind(Op::add, {a, b}, {}));    // a + b
//   Tensor s = call1(Op::sum, {a, IntList{2}, true});          // a:sum(2, {keepdim=true})
//
// Every op goes through `call`: it checks devices, runs the op's meta rule (shapes, dtypes,
// errors: the one place where bad input is diagnosed), then the kernel of the tensors' device.
// With fake inputs only the meta rule runs and fake outputs come back: that is how capture
// traces without computing.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tc/value.h"

namespace tc {

enum class Op : uint16_t {
#define TC_OP(name, kind, group, args, ret) name,
#include "tc/ops.def"
#undef TC_OP
};
constexpr int kNumOps = 0
#define TC_OP(name, kind, group, args, ret) +1
#include "tc/ops.def"
#undef TC_OP
    ;

enum class OpKind : uint8_t {
  Pointwise, Reduction, View, Movement, Contraction, Composite, Creation, Random, DataDependent
};
enum class OpGroup : uint8_t { pointwise, reduction, view, movement, linalg, nn, creation };

enum class ArgType : uint8_t {
  Tensor, TensorList, Scalar, Int, Float, FloatOrTensor, FloatList, Bool, IntList, Dim, DimList, Str,
  ScalarType, Device, Padding
};

struct ArgSpec {
  std::string name;
  ArgType type;
  bool optional = false;  // `?`: accepts nil/None
  bool varargs = false;   // `int...` / `Dim...`
  bool mutated = false;   // `Tensor!`
  bool kwonly = false;    // after `*`
  bool has_default = false;
  Value default_value;
};

enum class ReturnKind : uint8_t { Tensor, Tuple, List };

struct OpSchema {
  Op op;
  const char* name;
  OpKind kind;
  OpGroup group;
  std::vector<ArgSpec> args;
  ReturnKind returns;
  int num_returns;  // for Tensor and Tuple
  std::string signature() const;  // "add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
};

const OpSchema& schema(Op op);
const char* op_name(Op op);
std::optional<Op> op_from_name(std::string_view name);

// Output metadata computed by a meta rule. `offset` is absolute (views: in the input's storage).
struct TensorMeta {
  Shape sizes, strides;
  int64_t offset = 0;
  DType dtype = DType::Float32;
  Device device;
  int64_t view_of = -1;  // index into the args of the tensor this output views, or -1
};
using Metas = std::vector<TensorMeta>;

// Binds positional and keyword arguments to the schema: checks types, converts (a number given
// for a Tensor becomes a wrapped 0-dim tensor; an int for an int[] becomes a list of one),
// fills defaults. Errors name the op and the argument (ValueError/TypeError-like ValueError).
Stack bind(Op op, Stack positional, std::vector<std::pair<std::string, Value>> keywords);

// Runs the op on bound arguments. Results in schema order (a Tensor[] result is one TensorList).
Stack call(Op op, const Stack& args);
// Observes the top-level calls of `call` on this thread: `on_call` gets each call's bound
// arguments and results after it ran; calls made while an observed call runs (a composite's
// kernel, a decomposition) are not reported. Capture's compiled training records the backward
// graph with it (capture/training.cpp). While no thread has one, `call` pays one plain load.
struct CallObserver {
  virtual ~CallObserver() = default;
  virtual void on_call(Op op, const Stack& args, const Stack& out) = 0;
};
// Installs `o` (null: none) and returns the previous observer.
CallObserver* set_call_observer(CallObserver* o);
// Convenience for single-tensor results; binds `positional` first.
Tensor call1(Op op, Stack positional, std::vector<std::pair<std::string, Value>> keywords = {});

// Only the meta rule: output metadata, or an error for bad input.
Metas infer_meta(Op op, const Stack& args);

// Group entry points implemented in stdlib/cpu/<group>.cpp (and later stdlib/cuda/).
#define TC_GROUP_FNS(g)                                 \
  Metas meta_##g(Op op, const Stack& args);             \
  Stack cpu_##g(Op op, const Stack& args, const Metas& out);
TC_GROUP_FNS(pointwise)
TC_GROUP_FNS(reduction)
TC_GROUP_FNS(view)
TC_GROUP_FNS(movement)
TC_GROUP_FNS(linalg)
TC_GROUP_FNS(nn)
TC_GROUP_FNS(creation)
#undef TC_GROUP_FNS
#ifdef TC_HAVE_CUDA
// Eager kernels for ops whose tensors (or, for creation ops, whose result) live on a CUDA device
// (stdlib/cuda/dispatch.cpp).
Stack cuda_dispatch(Op op, const Stack& args, const Metas& out);
#endif

// Helpers for meta rules and kernels.
TensorMeta contiguous_meta(const Shape& sizes, DType dtype, Device device);
Tensor empty_from_meta(const TensorMeta& m);
// PyTorch's result type for the tensors among args (tiers: dim>0 tensors, 0-dim tensors,
// wrapped numbers).
DType result_type(const std::vector<Tensor>& tensors);
DType result_type(const Tensor* const* tensors, size_t n);  // the same without a vector
DType default_dtype();
void set_default_dtype(DType t);
Device default_device();
void set_default_device(Device d);

}  // namespace tc
