// Streams and events (tc/cuda.h): the per-device stream pool, the calling thread's current stream
// per device, waits between streams, and events for ordering and timing.
#include <mutex>
#include <utility>

#include "cuda/runtime.h"
#include "tc/tensor.h"

namespace tc::cuda {
namespace {

constexpr int kMaxDevices = 64;
thread_local int t_current[kMaxDevices] = {};  // current stream id per device; 0: the default stream

std::mutex& mu() {
  static std::mutex m;
  return m;
}

// The device's state for stream and event work: a real GPU (not compile-only mode) is needed.
DeviceState& real_dev(int device) {
  TC_CHECK(!compile_only(), DeviceError, "CUDA streams and events need a GPU (tc is in compile-only mode)");
  return dev(device);
}

void check_stream(const Stream& s) {
  TC_CHECK(s.id >= 0 && s.id <= Stream::kPoolStreams, ValueError, "not a tc CUDA stream (id %d)", s.id);
  real_dev(s.device);  // DeviceError without CUDA or for a device that does not exist
}

}  // namespace

int current_stream_id(int device) {
  TC_ASSERT(device >= 0 && device < kMaxDevices, "device index out of range");
  return t_current[device];
}

CUstream stream_handle(int device, int id) {
  if (compile_only()) return nullptr;
  DeviceState& ds = dev(device);
  if (CUstream s = ds.streams[id]) return s;
  std::lock_guard<std::mutex> lock(mu());
  if (!ds.streams[id]) check(drv().StreamCreate(&ds.streams[id], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return ds.streams[id];
}

Stream Stream::create(int device) {
  DeviceState& ds = real_dev(device);
  std::lock_guard<std::mutex> lock(mu());
  Stream s{device, 1 + ds.next_pool};
  ds.next_pool = (ds.next_pool + 1) % kPoolStreams;
  return s;
}

void* Stream::handle() const {
  check_stream(*this);
  return stream_handle(device, id);
}

void Stream::synchronize() const {
  forbid_in_capture("Stream:synchronize()");
  check(drv().StreamSynchronize((CUstream)handle()), "stream synchronize");
}

bool Stream::query() const {
  CUresult r = drv().StreamQuery((CUstream)handle());
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "stream query");
  return true;
}

void Stream::wait_event(const Event& e) const {
  CUstream s = (CUstream)handle();
  if (!e.recorded()) return;
  check(drv().StreamWaitEvent(s, (CUevent)e.handle(), 0), "stream wait_event");
}

void Stream::wait_stream(const Stream& other) const {
  if (other == *this) return;
  Event e;
  e.record(other);
  wait_event(e);  // the driver keeps what it needs of e after it is destroyed
}

Stream default_stream(int device) {
  check_stream(Stream{device, 0});
  return Stream{device, 0};
}

Stream current_stream(int device) {
  ensure_initialized();
  check_stream(Stream{device, 0});
  return Stream{device, current_stream_id(device)};
}

void set_current_stream(Stream s) {
  check_stream(s);
  t_current[s.device] = s.id;
}

// ---- events ------------------------------------------------------------------------------------

Event::~Event() {
  if (ev_) drv().EventDestroy((CUevent)ev_);
}

Event::Event(Event&& o) noexcept
    : timing_(o.timing_), device_(std::exchange(o.device_, -1)), ev_(std::exchange(o.ev_, nullptr)) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (ev_) drv().EventDestroy((CUevent)ev_);
    timing_ = o.timing_;
    device_ = std::exchange(o.device_, -1);
    ev_ = std::exchange(o.ev_, nullptr);
  }
  return *this;
}

void Event::record(Stream s) {
  CUstream st = (CUstream)s.handle();
  TC_CHECK(!ev_ || device_ == s.device, DeviceError,
           "event recorded on cuda:%d cannot be recorded on a stream of cuda:%d", device_, s.device);
  if (!ev_) {
    CUevent e = nullptr;
    check(drv().EventCreate(&e, timing_ ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    ev_ = e;
    device_ = s.device;
  }
  check(drv().EventRecord((CUevent)ev_, st), "event record");
}

void Event::synchronize() const {
  if (!ev_) return;
  real_dev(device_);
  forbid_in_capture("Event:synchronize()");
  check(drv().EventSynchronize((CUevent)ev_), "event synchronize");
}

bool Event::query() const {
  if (!ev_) return true;
  real_dev(device_);
  CUresult r = drv().EventQuery((CUevent)ev_);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "event query");
  return true;
}

float Event::elapsed_time(const Event& end) const {
  TC_CHECK(timing_ && end.timing_, ValueError,
           "elapsed_time needs both events created with enable_timing=true");
  TC_CHECK(ev_ && end.ev_, ValueError, "elapsed_time: both events must be recorded first");
  synchronize();
  end.synchronize();
  float ms = 0;
  check(drv().EventElapsedTime(&ms, (CUevent)ev_, (CUevent)end.ev_), "event elapsed_time");
  return ms;
}

}  // namespace tc::cuda
