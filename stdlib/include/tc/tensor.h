// Storage (refcounted memory on a device) and Tensor (a strided view of a storage).
//
//   tc::Tensor a = tc::Tensor::empty({2, 3}, tc::DType::Float32);
//   a.data<float>()[0] = 1.0f;                  // contiguous: element (i,j) is at i*3+j
//   tc::Tensor col = a.as_strided({2}, {3}, 1);  // a view of column 2, shares a's storage
//
// Sizes and strides are in elements; the offset too. Strides may be 0 (broadcast views).
// A "fake" tensor has metadata but no storage: capture traces ops on fake tensors and the
// dispatcher then runs only the meta rules.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tc/device.h"
#include "tc/dtype.h"

namespace tc {

using Shape = std::vector<int64_t>;

class Storage {
 public:
  using Deleter = void (*)(void* data, void* ctx);
  // Owned memory from the device's allocator (CPU: 64-byte aligned).
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // Borrowed memory: `deleter(data, ctx)` runs when the last reference goes (may be null).
  // `counted`: the bytes count in live_bytes while the storage lives (memory tc allocated for it,
  // as pinned host memory), so the Lua collector paces by them as by owned storage.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device, Deleter deleter,
                                       void* ctx, bool counted = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  // Bumped by every in-place write through any view of this storage: autograd checks that a
  // tensor saved for the backward was not changed since (PyTorch's version counter).
  uint64_t version = 0;
  Device device() const { return device_; }

  // Bytes of owned storage alive in this process (the Lua binding reports it to the collector).
  static int64_t live_bytes();

  // When an allocation fails (CPU or device), the memory-pressure hook runs once and the
  // allocation is retried: tensors that are garbage to a Lua collector still hold memory, and
  // the Lua binding's hook runs a full collection of every Lua state (on the thread that
  // installed it; elsewhere the failure is reported at once). Then OutOfMemoryError.
  using PressureHook = void (*)();
  static void set_pressure_hook(PressureHook hook);
  // Runs the memory-pressure hook now (a full collection of the Lua states) when this thread may:
  // true if it ran. For callers about to pay more for memory that may be garbage than the
  // collection costs (a CUDA graph's outputs still referenced before a replay, tc/cuda_graph.h).
  static bool collect_garbage();
  // A cap on owned CPU storage (bytes; 0: none, the default): allocations past it fail as out of
  // memory. For tests of the out-of-memory path, and for hosts that budget tc's memory.
  static void set_cpu_limit(int64_t bytes);
  // CPU bytes an allocation may still hope for: what set_cpu_limit leaves, else the machine's
  // physical memory. For work whose memory is not one storage (a list of 2^30 views) to fail as
  // out of memory up front instead of exhausting the machine.
  static int64_t cpu_budget();

  // Exchanges memory with `other` (same size and device): data, ownership and deleter. Tensors
  // over this storage then read `other`'s bytes; this storage's old memory goes with `other`. The
  // bytes are not copied and the version counter stays. For memory that is about to be
  // overwritten under a tensor that must keep its values (a CUDA graph's outputs moved out of the
  // graph's pool before a replay).
  void swap_memory(Storage& other);

  Storage(void* data, size_t nbytes, Device device, bool owned, Deleter deleter, void* ctx)
      : data_(data), nbytes_(nbytes), device_(device), owned_(owned), deleter_(deleter), ctx_(ctx) {}

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  bool owned_;  // allocated by Storage::allocate (else borrowed through wrap)
  bool counted_ = false;  // borrowed, and counted in live_bytes (wrap's `counted`)
  Deleter deleter_;
  void* ctx_;
};

// Allocator hooks for non-CPU devices (the CUDA runtime installs one on first use).
struct DeviceAllocator {
  void* (*alloc)(size_t nbytes, Device device);  // throws OutOfMemoryError
  void (*free)(void* ptr, Device device);
  void (*copy)(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes);
};
void set_device_allocator(DeviceType type, const DeviceAllocator* a);
const DeviceAllocator* device_allocator(DeviceType type);  // null if that device is not available

// Bumped whenever the metadata (sizes, strides, dtype, device, requires_grad) of an existing tensor
// changes in place. Capture's guard fast path does not re-check tensors it has seen while this
// stays the same: code that changes the metadata of a live TensorImpl must call it.
inline std::atomic<uint64_t> g_metadata_epoch{0};
inline uint64_t metadata_epoch() { return g_metadata_epoch.load(std::memory_order_relaxed); }
inline void bump_metadata_epoch() { g_metadata_epoch.fetch_add(1, std::memory_order_relaxed); }

namespace autograd {
struct AutogradMeta;  // tc/autograd.h: grad_fn, hooks, retain_grad
}

struct TensorImpl {
  std::shared_ptr<Storage> storage;  // null for a fake tensor
  Shape sizes, strides;
  int64_t offset = 0;  // elements
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;
  bool wrapped_number = false;  // a Lua number turned into a 0-dim tensor for an op
  // The tensor a View op's result views (the root of a chain of views), null for others.
  std::shared_ptr<TensorImpl> view_base;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::AutogradMeta> autograd;  // null for leaves without hooks
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  static Tensor empty(const Shape& sizes, DType dtype, Device device = {});
  static Tensor empty_strided(const Shape& sizes, const Shape& strides, DType dtype, Device device = {});
  static Tensor fake(const Shape& sizes, const Shape& strides, DType dtype, Device device = {});
  // 0-dim tensors from Lua numbers. `wrapped` marks them for scalar type promotion.
  static Tensor scalar(double v, DType dtype = DType::Float64, bool wrapped = false);
  static Tensor scalar_int(int64_t v, DType dtype = DType::Int64, bool wrapped = false);
  static Tensor scalar_bool(bool v, bool wrapped = false);

  bool defined() const { return impl_ != nullptr; }
  bool is_fake() const { return impl_->storage == nullptr; }
  const Shape& sizes() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t size(int64_t d) const;  // 0-based index into sizes (internal use)
  int64_t stride(int64_t d) const;
  int64_t dim() const { return (int64_t)impl_->sizes.size(); }
  int64_t numel() const;
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  size_t itemsize() const { return tc::itemsize(impl_->dtype); }
  bool is_contiguous() const;
  bool requires_grad() const { return impl_->requires_grad; }
  void set_requires_grad(bool r) {
    if (impl_->requires_grad == r) return;
    impl_->requires_grad = r;
    bump_metadata_epoch();
  }
  bool is_wrapped_number() const { return impl_->wrapped_number; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  // Pointer to element 0 of the view (CPU tensors; device pointers for CUDA).
  void* data_ptr() const;
  template <typename T>
  T* data() const { return static_cast<T*>(data_ptr()); }

  // A view sharing the storage.
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const;
  Tensor contiguous() const;   // self if contiguous, else a contiguous copy
  Tensor clone() const;        // always a contiguous copy
  Tensor to(DType dtype) const;  // converted copy (self if already of that dtype)
  void copy_from(const Tensor& src);  // in place, broadcasting src, converting dtype
  void bump_version() {
    if (impl_->storage) impl_->storage->version++;
  }
  uint64_t version() const { return impl_->storage ? impl_->storage->version : 0; }

  // Single-element tensors read as Lua values (float dtypes -> double).
  double item_double() const;
  int64_t item_int() const;

  std::string meta_string() const;  // "float32[2, 3]"

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Overflow-checked size arithmetic. Every size, numel, stride, offset and byte count computed
// from user input goes through these: a wrapped product once made tc.zeros(2^62) a 0-byte
// storage and tc.ones(2^62) a crash. On overflow they throw ShapeError naming `what` and the
// operands (PyTorch: "numel: integer multiplication overflow").
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);

Shape contiguous_strides(const Shape& sizes);  // ShapeError if a stride overflows int64
int64_t shape_numel(const Shape& sizes);       // ShapeError if the count overflows int64
std::string shape_string(const Shape& sizes);  // "[2, 3]"
// Bytes a tensor of these sizes, strides and offset spans in its storage (0 if it has no
// element). Sizes and strides must not be negative. The count is checked: a tensor whose bytes
// pass INT64_MAX is representable (uint8[2^62] is a valid shape) but can never be allocated, so
// that is an OutOfMemoryError naming the dtype and shape; a numel past int64 is a ShapeError.
int64_t storage_nbytes(const Shape& sizes, const Shape& strides, int64_t offset, DType dtype);

// Dims at the op boundary are 1-based (negative counts from the end, -1 is the last);
// returns the 0-based index or throws IndexError. A 0-dim tensor accepts 1 and -1.
int64_t wrap_dim(int64_t dim, int64_t rank);
// Broadcast two shapes (PyTorch rules) or throw ShapeError naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace tc
