// Storage allocation and the Tensor basics: views, copies with dtype conversion, item access.
#include "tc/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <thread>
#include <mutex>
#include <cstring>
#include <sstream>

#include "cpu/loops.h"
#include "tc/error.h"
#ifdef TC_HAVE_CUDA
#include "tc/cuda.h"
#endif

namespace tc {
namespace {

std::atomic<int64_t> g_live_bytes[2] = {0, 0};  // owned (and counted wrapped) storage alive, per DeviceType
const DeviceAllocator* g_allocators[2] = {nullptr, nullptr};

// CPU memory is cached after use: eager code frees and reallocates tensors of the same sizes
// all the time, and fresh memory costs glibc's aligned-allocation path (small blocks) or mmap
// plus page faults on first touch (large blocks). Small blocks come from power-of-two free lists,
// large ones (rounded to 2 MiB) from lists keyed by size. At most kMaxCachedBytes stay cached.
// Fresh large blocks are 2 MiB aligned and asked for transparent huge pages (PyTorch's
// THP_MEM_ALLOC_ENABLE): one fault per 2 MiB instead of 512. On the dev VM a fresh 64 MiB
// block's first write went from ~300-540 ms (4 KiB faults, ~26 us each there) to ~21 ms.
class CpuCache {
 public:
  static constexpr size_t kMinBlock = 64, kMaxSmall = size_t(1) << 20, kLargeQuantum = size_t(2) << 20,
                          kMaxCachedBytes = size_t(512) << 20;
  void* alloc(size_t nbytes, size_t* block) {
    *block = round_up(nbytes);
    {
      std::lock_guard g(mu_);
      std::vector<void*>* list = find(*block);
      if (list && !list->empty()) {
        void* p = list->back();
        list->pop_back();
        cached_ -= *block;
        return p;
      }
    }
    if (*block <= kMaxSmall) return std::aligned_alloc(64, *block);
    void* p = std::aligned_alloc(kLargeQuantum, *block);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, *block, MADV_HUGEPAGE);  // advice only: fails harmlessly where THP is off
#endif
    return p;
  }
  void free(void* p, size_t block) {
    std::lock_guard g(mu_);
    if (cached_ + block <= kMaxCachedBytes) {
      (block <= kMaxSmall ? small_[small_class(block)] : large_[block]).push_back(p);
      cached_ += block;
      return;
    }
    std::free(p);
  }

 private:
  static size_t round_up(size_t n) {
    if (n > kMaxSmall) return (n + kLargeQuantum - 1) / kLargeQuantum * kLargeQuantum;
    size_t b = kMinBlock;
    while (b < n) b <<= 1;
    return b;
  }
  static int small_class(size_t block) { return __builtin_ctzll(block) - __builtin_ctzll(kMinBlock); }
  std::vector<void*>* find(size_t block) {
    if (block <= kMaxSmall) return &small_[small_class(block)];
    auto it = large_.find(block);
    return it == large_.end() ? nullptr : &it->second;
  }
  std::mutex mu_;
  std::vector<void*> small_[16];
  std::map<size_t, std::vector<void*>> large_;
  size_t cached_ = 0;
};
CpuCache& cpu_cache() {
  static CpuCache* c = new CpuCache;  // never destroyed: storages may outlive static destruction
  return *c;
}
void cpu_free(void* p, void* ctx) { cpu_cache().free(p, (size_t)(uintptr_t)ctx); }

const DeviceAllocator* require_allocator(Device d) {
  const DeviceAllocator* a = g_allocators[(int)d.type];
#ifdef TC_HAVE_CUDA
  if (!a && d.is_cuda()) {  // first use: load the driver (DeviceError with the reason if unusable)
    cuda::ensure_initialized();
    a = g_allocators[(int)d.type];
  }
#endif
  TC_CHECK(a, DeviceError, "device %s is not available (tc was started without a usable CUDA driver "
           "or GPU; tc.cuda.is_available() is false)", d.str().c_str());
  return a;
}

}  // namespace

void set_device_allocator(DeviceType type, const DeviceAllocator* a) { g_allocators[(int)type] = a; }
const DeviceAllocator* device_allocator(DeviceType type) { return g_allocators[(int)type]; }

namespace {
std::atomic<Storage::PressureHook> g_pressure_hook{nullptr};
std::thread::id g_pressure_thread;
thread_local bool t_in_pressure_hook = false;
std::atomic<int64_t> g_cpu_limit{0};

// One try: CPU memory (null when it fails) or the device allocator (throws OutOfMemoryError).
void* try_allocate(size_t nbytes, Device device, size_t* block) {
  if (device.is_cpu()) {
    const int64_t limit = g_cpu_limit.load(std::memory_order_relaxed);
    if (limit > 0 && int64_t(nbytes) > limit - g_live_bytes[int(DeviceType::CPU)].load())
      return nullptr;
    return cpu_cache().alloc(nbytes, block);
  }
  return require_allocator(device)->alloc(nbytes, device);
}

// Runs the memory-pressure hook if this thread may (see tensor.h); true if it ran.
bool relieve_pressure() {
  Storage::PressureHook hook = g_pressure_hook.load();
  if (!hook || t_in_pressure_hook || std::this_thread::get_id() != g_pressure_thread) return false;
  t_in_pressure_hook = true;
  try {
    hook();
  } catch (...) {
  }
  t_in_pressure_hook = false;
  return true;
}
}  // namespace

void Storage::set_pressure_hook(PressureHook hook) {
  g_pressure_thread = std::this_thread::get_id();
  g_pressure_hook = hook;
}

void Storage::set_cpu_limit(int64_t bytes) { g_cpu_limit = bytes; }

int64_t Storage::cpu_budget() {
  const int64_t limit = g_cpu_limit.load(std::memory_order_relaxed);
  if (limit > 0) return std::max<int64_t>(0, limit - g_live_bytes[int(DeviceType::CPU)].load());
  static const int64_t physical = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
  return physical;
}

bool Storage::collect_garbage() { return relieve_pressure(); }

void Storage::swap_memory(Storage& other) {
  TC_ASSERT(nbytes_ == other.nbytes_ && device_ == other.device_, "swap_memory of storages unlike in size or device");
  std::swap(data_, other.data_);
  std::swap(owned_, other.owned_);
  std::swap(counted_, other.counted_);
  std::swap(deleter_, other.deleter_);
  std::swap(ctx_, other.ctx_);
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  void* p = nullptr;
  size_t block = 0;
  TC_CHECK(nbytes <= (size_t)INT64_MAX, OutOfMemoryError, "%s out of memory: tried to allocate %zu bytes",
           device.str().c_str(), nbytes);
  if (device.is_cpu()) {
    p = try_allocate(nbytes, device, &block);
    if (!p && relieve_pressure()) p = try_allocate(nbytes, device, &block);
    TC_CHECK(p, OutOfMemoryError, "CPU out of memory: tried to allocate %zu bytes%s", nbytes,
             g_cpu_limit.load() > 0 ? " (past the limit set by set_cpu_limit)" : "");
  } else {
    try {
      p = try_allocate(nbytes, device, &block);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::OutOfMemoryError || !relieve_pressure()) throw;
      p = try_allocate(nbytes, device, &block);
    }
  }
  g_live_bytes[int(device.type)] += (int64_t)nbytes;
  // ctx carries the CPU block size back to the cache
  return std::make_shared<Storage>(p, nbytes, device, true, nullptr, (void*)(uintptr_t)block);
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, Deleter deleter,
                                       void* ctx, bool counted) {
  auto s = std::make_shared<Storage>(data, nbytes, device, false, deleter, ctx);
  if (counted) g_live_bytes[int(device.type)] += (int64_t)nbytes;
  s->counted_ = counted;
  return s;
}

Storage::~Storage() {
  if (!owned_) {
    if (counted_) g_live_bytes[int(device_.type)] -= (int64_t)nbytes_;
    if (deleter_) deleter_(data_, ctx_);
    return;
  }
  g_live_bytes[int(device_.type)] -= (int64_t)nbytes_;
  if (device_.is_cpu())
    cpu_free(data_, ctx_);
  else if (auto a = g_allocators[(int)device_.type])
    a->free(data_, device_);
}

int64_t Storage::live_bytes() { return g_live_bytes[0].load() + g_live_bytes[1].load(); }

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  TC_CHECK(!__builtin_mul_overflow(a, b, &r), ShapeError, "%s: %lld * %lld overflows int64 (sizes past 2^63 - 1)",
           what, (long long)a, (long long)b);
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  TC_CHECK(!__builtin_add_overflow(a, b, &r), ShapeError, "%s: %lld + %lld overflows int64 (sizes past 2^63 - 1)",
           what, (long long)a, (long long)b);
  return r;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t s = 1;
  for (int64_t d = (int64_t)sizes.size() - 1; d >= 0; d--) {
    st[d] = s;
    if (d > 0 && __builtin_mul_overflow(s, std::max<int64_t>(sizes[d], 1), &s))
      TC_FAIL(ShapeError, "the strides of a tensor of shape %s overflow int64", shape_string(sizes).c_str());
  }
  return st;
}

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  bool overflow = false;
  for (auto s : sizes) {
    if (s == 0) return 0;  // [0, 2^40, 2^40] has no element: not an overflow
    overflow |= __builtin_mul_overflow(n, s, &n);
  }
  TC_CHECK(!overflow, ShapeError, "a tensor of shape %s would have more than 2^63 - 1 elements (numel overflows int64)",
           shape_string(sizes).c_str());
  return n;
}

int64_t storage_nbytes(const Shape& sizes, const Shape& strides, int64_t offset, DType dtype) {
  if (shape_numel(sizes) == 0) return 0;
  int64_t span = 1;  // elements from the first to one past the last, plus the offset
  bool overflow = __builtin_add_overflow(span, offset, &span);
  for (size_t d = 0; d < sizes.size(); d++) {
    int64_t extent;
    overflow |= __builtin_mul_overflow(sizes[d] - 1, strides[d], &extent);
    overflow |= __builtin_add_overflow(span, extent, &span);
  }
  TC_CHECK(!overflow, ShapeError, "a tensor of shape %s with strides %s and offset %lld spans more than 2^63 - 1 elements",
           shape_string(sizes).c_str(), shape_string(strides).c_str(), (long long)offset);
  int64_t bytes;
  TC_CHECK(!__builtin_mul_overflow(span, (int64_t)tc::itemsize(dtype), &bytes), OutOfMemoryError,
           "out of memory: a %s tensor of shape %s would need %.4g bytes, more than any address space (the byte "
           "count overflows int64)",
           dtype_name(dtype), shape_string(sizes).c_str(), (double)span * (double)tc::itemsize(dtype));
  return bytes;
}

std::string shape_string(const Shape& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); i++) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim >= 1 && dim <= r) return dim - 1;
  if (dim < 0 && dim >= -r) return r + dim;
  if (dim == 0)
    TC_FAIL(IndexError, "dimension 0 is out of range: dims are 1-based (1..%lld, or -%lld..-1 from the end)",
            (long long)r, (long long)r);
  TC_FAIL(IndexError, "dimension out of range (expected to be in range of [-%lld, %lld] excluding 0, but got %lld)",
          (long long)r, (long long)r, (long long)dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; i++) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1)
      TC_FAIL(ShapeError,
              "the size of tensor a (%lld) must match the size of tensor b (%lld) at dimension %lld "
              "(shapes %s and %s)",
              (long long)x, (long long)y, (long long)(i + 1), shape_string(a).c_str(), shape_string(b).c_str());
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Tensor Tensor::empty(const Shape& sizes, DType dtype, Device device) {
  return empty_strided(sizes, contiguous_strides(sizes), dtype, device);
}

Tensor Tensor::empty_strided(const Shape& sizes, const Shape& strides, DType dtype, Device device) {
  for (auto s : sizes) TC_CHECK(s >= 0, ShapeError, "negative dimension %lld in shape %s", (long long)s, shape_string(sizes).c_str());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate((size_t)storage_nbytes(sizes, strides, 0, dtype), device);
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

Tensor Tensor::fake(const Shape& sizes, const Shape& strides, DType dtype, Device device) {
  for (auto s : sizes) TC_CHECK(s >= 0, ShapeError, "negative dimension %lld in shape %s", (long long)s, shape_string(sizes).c_str());
  storage_nbytes(sizes, strides, 0, dtype);  // the tensor it stands for must be possible
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

Tensor Tensor::scalar(double v, DType dtype, bool wrapped) {
  Tensor t = empty({}, dtype);
  visit_dtype(dtype, [&]<typename T>() { *t.data<T>() = static_cast<T>(static_cast<opmath_t<T>>(v)); });
  t.impl_->wrapped_number = wrapped;
  return t;
}
Tensor Tensor::scalar_int(int64_t v, DType dtype, bool wrapped) {
  Tensor t = empty({}, dtype);
  visit_dtype(dtype, [&]<typename T>() { *t.data<T>() = static_cast<T>(static_cast<opmath_t<T>>(v)); });
  t.impl_->wrapped_number = wrapped;
  return t;
}
Tensor Tensor::scalar_bool(bool v, bool wrapped) {
  Tensor t = empty({}, DType::Bool);
  *t.data<bool>() = v;
  t.impl_->wrapped_number = wrapped;
  return t;
}

int64_t Tensor::size(int64_t d) const { return impl_->sizes.at(d < 0 ? d + dim() : d); }
int64_t Tensor::stride(int64_t d) const { return impl_->strides.at(d < 0 ? d + dim() : d); }
int64_t Tensor::numel() const { return shape_numel(impl_->sizes); }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // as PyTorch: no element is out of place (mm of [0, k] crashed)
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; d--) {
    if (impl_->sizes[d] == 1) continue;
    if (impl_->strides[d] != expected) return false;
    expected *= impl_->sizes[d];
  }
  return true;
}

void* Tensor::data_ptr() const {
  TC_ASSERT(impl_->storage, "data_ptr() of a fake tensor");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * (int64_t)itemsize();
}

Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const {
  shape_numel(sizes);  // a view may be larger than its storage (stride 0) but not past int64
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = impl_->dtype;
  impl->device = impl_->device;
  impl->requires_grad = impl_->requires_grad;
  return Tensor(std::move(impl));
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = is_fake() ? fake(sizes(), contiguous_strides(sizes()), dtype(), device())
                         : empty(sizes(), dtype(), device());
  if (!is_fake()) out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = is_fake() ? fake(sizes(), contiguous_strides(sizes()), dt, device()) : empty(sizes(), dt, device());
  if (!is_fake()) out.copy_from(*this);
  return out;
}

namespace {

template <typename D, typename S>
void convert_run(std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
  if constexpr (std::is_same_v<D, S>) {
    if (s[0] == (int64_t)sizeof(D) && s[1] == (int64_t)sizeof(S)) {
      std::memcpy(p[0], p[1], n * sizeof(D));
      return;
    }
  }
  for (int64_t i = 0; i < n; i++) {
    S v = *reinterpret_cast<S*>(p[1] + i * s[1]);
    if constexpr (std::is_same_v<D, bool>)
      *reinterpret_cast<D*>(p[0] + i * s[0]) = static_cast<opmath_t<S>>(v) != 0;
    else
      *reinterpret_cast<D*>(p[0] + i * s[0]) = static_cast<D>(static_cast<opmath_t<D>>(static_cast<opmath_t<S>>(v)));
  }
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  Shape b = broadcast_shapes(sizes(), src.sizes());
  TC_CHECK(b == sizes(), ShapeError, "copy: source of shape %s cannot be broadcast to destination shape %s",
           shape_string(src.sizes()).c_str(), shape_string(sizes()).c_str());
  if (is_fake() || src.is_fake()) return;
  if (!device().is_cpu() || !src.device().is_cpu()) {
#ifdef TC_HAVE_CUDA
    if (device().is_cuda() || src.device().is_cuda()) {  // device kernels: any strides and dtypes
      cuda::ensure_initialized();
      cuda::copy_tensor(*this, src);
      bump_version();
      return;
    }
#endif
    // Cross-device or device-side: contiguous same-dtype buffers, converted on the CPU if needed.
    Device dev = device().is_cpu() ? src.device() : device();
    const DeviceAllocator* a = require_allocator(dev);
    Tensor s = src;
    if (s.sizes() != sizes()) s = s.as_strided(sizes(), Shape(sizes().size(), 0), s.offset()).clone();
    if (s.dtype() != dtype() || !s.is_contiguous()) {
      TC_CHECK(s.device().is_cpu() || a, DeviceError, "no device copy available");
      if (!s.device().is_cpu()) {  // bring to host first
        Tensor h = empty(s.sizes(), s.dtype());
        Tensor sc = s.is_contiguous() ? s : s;  // device kernels make it contiguous (CUDA issue)
        a->copy(h.data_ptr(), Device{}, sc.data_ptr(), sc.device(), (size_t)sc.numel() * sc.itemsize());
        s = h;
      }
      s = s.to(dtype()).contiguous();
    }
    TC_CHECK(is_contiguous(), DeviceError, "copy into a non-contiguous %s tensor is not supported yet",
             device().str().c_str());
    a->copy(data_ptr(), device(), s.data_ptr(), s.device(), (size_t)numel() * itemsize());
    bump_version();
    return;
  }
  Shape sd = cpu::broadcast_byte_strides(*this, sizes()), ss = cpu::broadcast_byte_strides(src, sizes());
  char* dp = static_cast<char*>(data_ptr());
  char* sp = static_cast<char*>(src.data_ptr());
  visit_dtype(dtype(), [&]<typename D>() {
    visit_dtype(src.dtype(), [&]<typename S>() {
      cpu::strided_loop<2>(sizes(), {dp, sp}, {sd, ss}, convert_run<D, S>);
    });
  });
  bump_version();
}

namespace {
// The single element of `t` read as R (float dtypes convert through float, others exactly).
template <typename R>
R read_item(const Tensor& t) {
  TC_CHECK(t.numel() == 1, ValueError, "a Tensor with %lld elements cannot be converted to a number",
           (long long)t.numel());
  Tensor h = t;
  if (!t.device().is_cpu()) {
    h = Tensor::empty(Shape(t.dim(), 1), t.dtype());
    h.copy_from(t);
  }
  return visit_dtype(t.dtype(), [&]<typename T>() { return (R) static_cast<opmath_t<T>>(*h.data<T>()); });
}
}  // namespace

double Tensor::item_double() const { return read_item<double>(*this); }
int64_t Tensor::item_int() const { return read_item<int64_t>(*this); }

std::string Tensor::meta_string() const {
  return std::string(dtype_name(dtype())) + shape_string(sizes()) +
         (device().is_cpu() ? "" : " on " + device().str());
}

}  // namespace tc
