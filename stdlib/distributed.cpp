// tc.distributed's runtime (distributed.h): the TCP store, reduce-op names, and the "gloo" process
// group, whose collectives exchange CPU tensors through the store.
//
// Store protocol (one request at a time per connection, answered in order):
//   request  = op:u8 keylen:u32 key valuelen:u64 value
//   response = len:u64 bytes          (GET: the value; ADD: the new value as 8 bytes; CHECK: 1
//                                      byte; SET/ERASE: empty)
// A GET of a key not yet set is parked on the server until a SET or ADD gives it a value.
#include "tc/distributed.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "tc/error.h"
#include "tc/ops.h"

namespace tc::dist {
namespace {

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCheck, kErase };

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

// Writes all of buf; false when the peer is gone.
bool send_all(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

// Reads exactly n bytes before `deadline`; DeviceError on timeout or a closed connection.
void recv_all(int fd, void* buf, size_t n, Clock::time_point deadline, const char* what) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    double left = seconds_left(deadline);
    TC_CHECK(left > 0, DeviceError, "tc.distributed: store %s timed out", what);
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, (int)std::min(left * 1000.0 + 1, 1e9));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;
    ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    TC_CHECK(got > 0, DeviceError, "tc.distributed: the store server closed the connection during %s", what);
    p += got;
    n -= (size_t)got;
  }
}

std::string encode_request(Cmd cmd, const std::string& key, const std::string& value) {
  std::string m;
  uint32_t kl = (uint32_t)key.size();
  uint64_t vl = value.size();
  m.push_back((char)cmd);
  m.append(reinterpret_cast<const char*>(&kl), 4).append(key);
  m.append(reinterpret_cast<const char*>(&vl), 8).append(value);
  return m;
}

// ---- server ------------------------------------------------------------------------------------
class StoreServer {
 public:
  explicit StoreServer(int listen_fd) : listen_fd_(listen_fd) {
    if (::pipe(wake_) != 0) TC_FAIL(DeviceError, "tc.distributed: pipe() failed: %s", std::strerror(errno));
    thread_ = std::thread([this] { serve(); });
  }
  ~StoreServer() {
    char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (auto& [fd, _] : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

 private:
  struct Client {
    std::string in;  // bytes received, not yet a whole request
  };

  void reply(int fd, const std::string& bytes) {
    uint64_t n = bytes.size();
    std::string m(reinterpret_cast<const char*>(&n), 8);
    m += bytes;
    if (!send_all(fd, m.data(), m.size())) drop_.push_back(fd);
  }

  void wake_waiters(const std::string& key) {
    auto range = waiting_.equal_range(key);
    for (auto it = range.first; it != range.second; ++it) reply(it->second, data_[key]);
    waiting_.erase(range.first, range.second);
  }

  // Handles every whole request in c.in.
  void handle(int fd, Client& c) {
    for (;;) {
      if (c.in.size() < 5) return;
      uint32_t kl;
      std::memcpy(&kl, c.in.data() + 1, 4);
      if (c.in.size() < 5 + (size_t)kl + 8) return;
      uint64_t vl;
      std::memcpy(&vl, c.in.data() + 5 + kl, 8);
      size_t total = 5 + kl + 8 + vl;
      if (c.in.size() < total) return;
      Cmd cmd = (Cmd)c.in[0];
      std::string key = c.in.substr(5, kl), value = c.in.substr(13 + kl, vl);
      c.in.erase(0, total);
      switch (cmd) {
        case kSet:
          data_[key] = std::move(value);
          reply(fd, "");
          wake_waiters(key);
          break;
        case kGet: {
          auto it = data_.find(key);
          if (it != data_.end()) reply(fd, it->second);
          else waiting_.emplace(key, fd);
          break;
        }
        case kAdd: {
          int64_t delta = 0, now = 0;
          std::memcpy(&delta, value.data(), std::min<size_t>(8, value.size()));
          auto it = data_.find(key);
          if (it != data_.end() && it->second.size() == 8) std::memcpy(&now, it->second.data(), 8);
          now += delta;
          data_[key] = std::string(reinterpret_cast<const char*>(&now), 8);
          reply(fd, data_[key]);
          wake_waiters(key);
          break;
        }
        case kCheck: reply(fd, std::string(1, data_.count(key) ? 1 : 0)); break;
        case kErase:
          data_.erase(key);
          reply(fd, "");
          break;
        default: drop_.push_back(fd); return;
      }
    }
  }

  void serve() {
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto& [fd, _] : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd >= 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients_[fd];
        }
      }
      for (size_t i = 2; i < fds.size(); i++) {
        if (!fds[i].revents) continue;
        int fd = fds[i].fd;
        char buf[65536];
        ssize_t got = ::recv(fd, buf, sizeof buf, 0);
        if (got <= 0) {
          if (got < 0 && errno == EINTR) continue;
          drop_.push_back(fd);
          continue;
        }
        Client& c = clients_[fd];
        c.in.append(buf, (size_t)got);
        handle(fd, c);
      }
      for (int fd : drop_) {
        if (!clients_.erase(fd)) continue;
        for (auto it = waiting_.begin(); it != waiting_.end();) it = it->second == fd ? waiting_.erase(it) : ++it;
        ::close(fd);
      }
      drop_.clear();
    }
  }

  int listen_fd_;
  int wake_[2];
  std::thread thread_;
  std::map<int, Client> clients_;
  std::map<std::string, std::string> data_;
  std::multimap<std::string, int> waiting_;  // key -> client waiting in GET
  std::vector<int> drop_;
};

// ---- client ------------------------------------------------------------------------------------
sockaddr_storage resolve(const std::string& host, int port, socklen_t* len) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  TC_CHECK(rc == 0 && res, DeviceError, "tc.distributed: cannot resolve MASTER_ADDR '%s': %s", host.c_str(),
           gai_strerror(rc));
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return ss;
}

class TcpStore final : public Store {
 public:
  TcpStore(const std::string& host, int port, bool is_master, double timeout_s) : timeout_s_(timeout_s) {
    socklen_t len;
    sockaddr_storage addr = resolve(host, port, &len);
    if (is_master) {
      int lfd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(lfd, 1024) != 0) {
        int e = errno;
        ::close(lfd);
        TC_FAIL(DeviceError, "tc.distributed: the store cannot listen on %s:%d: %s (is MASTER_PORT in use?)",
                host.c_str(), port, std::strerror(e));
      }
      server_ = std::make_unique<StoreServer>(lfd);
    }
    // Connect, retrying until the master listens or the timeout passes.
    auto deadline = deadline_after(timeout_s);
    for (;;) {
      fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0) break;
      int e = errno;
      ::close(fd_);
      fd_ = -1;
      TC_CHECK(seconds_left(deadline) > 0, DeviceError,
               "tc.distributed: could not reach the store at %s:%d within %.0f s (%s); is rank 0 running?",
               host.c_str(), port, timeout_s, std::strerror(e));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const std::string& value) override { request(kSet, key, value, "set"); }
  std::string get(const std::string& key) override { return request(kGet, key, "", ("get('" + key + "')").c_str()); }
  int64_t add(const std::string& key, int64_t delta) override {
    std::string r = request(kAdd, key, std::string(reinterpret_cast<const char*>(&delta), 8), "add");
    int64_t v = 0;
    std::memcpy(&v, r.data(), std::min<size_t>(8, r.size()));
    return v;
  }
  bool check(const std::string& key) override { return request(kCheck, key, "", "check") == std::string(1, 1); }
  void erase(const std::string& key) override { request(kErase, key, "", "erase"); }

 private:
  std::string request(Cmd cmd, const std::string& key, const std::string& value, const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string m = encode_request(cmd, key, value);
    TC_CHECK(send_all(fd_, m.data(), m.size()), DeviceError, "tc.distributed: the store server is gone (%s)", what);
    auto deadline = deadline_after(timeout_s_);
    uint64_t n;
    recv_all(fd_, &n, 8, deadline, what);
    std::string out(n, '\0');
    if (n) recv_all(fd_, out.data(), n, deadline, what);
    return out;
  }

  double timeout_s_;
  std::unique_ptr<StoreServer> server_;  // declared before fd_ is closed: destroyed last
  int fd_ = -1;
  std::mutex mu_;
};

// ---- "gloo": CPU collectives through the store -------------------------------------------------
class DoneWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

void check_cpu_tensor(const Tensor& t, const char* what) {
  TC_CHECK(t.device().is_cpu(), DeviceError,
           "tc.distributed.%s: the gloo backend takes CPU tensors, got one on %s (use backend \"nccl\" for CUDA)",
           what, t.device().str().c_str());
  TC_CHECK(t.is_contiguous(), ValueError, "tc.distributed.%s: the tensor must be contiguous", what);
}

std::string bytes_of(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), (size_t)t.numel() * t.itemsize());
}

Tensor tensor_of(const std::string& bytes, const Tensor& like, int64_t numel) {
  Tensor t = Tensor::empty({numel}, like.dtype());
  TC_CHECK(bytes.size() == (size_t)numel * like.itemsize(), ValueError,
           "tc.distributed: ranks disagree on a collective's size (%zu bytes received, %lld expected)", bytes.size(),
           (long long)(numel * like.itemsize()));
  if (numel) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// Copies the n elements of a 1-D result into contiguous dst (in dst's dtype).
void store_into(Tensor& dst, const Tensor& src) {
  Tensor s = src.to(dst.dtype()).contiguous();
  if (dst.numel()) std::memcpy(dst.data_ptr(), s.data_ptr(), (size_t)dst.numel() * dst.itemsize());
  dst.bump_version();
}

// acc (op)= x, in the dtype of acc.
Tensor combine(const Tensor& acc, const Tensor& x, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return call1(Op::add, {acc, x});
    case ReduceOp::Max: return call1(Op::maximum, {acc, x});
    case ReduceOp::Min: return call1(Op::minimum, {acc, x});
    case ReduceOp::Product: return call1(Op::mul, {acc, x});
  }
  return acc;
}

class StoreGroup final : public ProcessGroup {
 public:
  StoreGroup(std::shared_ptr<Store> store, int rank, int world_size)
      : ProcessGroup(rank, world_size), store_(std::move(store)) {}
  std::string backend() const override { return "gloo"; }

  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) override {
    check_cpu_tensor(t, "all_reduce");
    check_avg(t, op, "all_reduce");
    std::vector<std::string> all = exchange(bytes_of(t));
    Tensor acc = reduce_block(all, t, 0, t.numel(), op);
    store_into(t, acc);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> broadcast(Tensor& t, int src) override {
    check_cpu_tensor(t, "broadcast");
    TC_CHECK(src >= 0 && src < world_size_, ValueError, "tc.distributed.broadcast: src %d is not a rank (world size %d)",
             src, world_size_);
    uint64_t s = seq_++;
    std::string key = "c/" + std::to_string(s) + "/" + std::to_string(src);
    if (rank_ == src) {
      store_->set(key, bytes_of(t));
    } else {
      Tensor got = tensor_of(store_->get(key), t, t.numel());
      if (t.numel()) std::memcpy(t.data_ptr(), got.data_ptr(), (size_t)t.numel() * t.itemsize());
    }
    finish(s, {key});
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& t) override {
    check_cpu_tensor(t, "all_gather");
    check_cpu_tensor(out, "all_gather");
    TC_CHECK(out.dtype() == t.dtype(), DTypeError, "tc.distributed.all_gather: the output is %s, the input %s", dtype_name(out.dtype()), dtype_name(t.dtype()));
    TC_CHECK(out.numel() == t.numel() * world_size_, ValueError,
             "tc.distributed.all_gather: the output needs world_size * %lld elements of %s", (long long)t.numel(),
             dtype_name(t.dtype()));
    std::vector<std::string> all = exchange(bytes_of(t));
    char* dst = static_cast<char*>(out.data_ptr());
    for (const std::string& b : all) {
      TC_CHECK(b.size() == (size_t)t.numel() * t.itemsize(), ValueError,
               "tc.distributed.all_gather: ranks disagree on the tensor's size");
      std::memcpy(dst, b.data(), b.size());
      dst += b.size();
    }
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check_cpu_tensor(in, "reduce_scatter");
    check_cpu_tensor(out, "reduce_scatter");
    check_avg(out, op, "reduce_scatter");
    TC_CHECK(out.dtype() == in.dtype(), DTypeError, "tc.distributed.reduce_scatter: the output is %s, the input %s", dtype_name(out.dtype()), dtype_name(in.dtype()));
    TC_CHECK(in.numel() == out.numel() * world_size_, ValueError,
             "tc.distributed.reduce_scatter: the input needs world_size * %lld elements of %s",
             (long long)out.numel(), dtype_name(out.dtype()));
    std::vector<std::string> all = exchange(bytes_of(in));
    Tensor acc = reduce_block(all, out, rank_ * out.numel(), out.numel(), op);
    store_into(out, acc);
    return std::make_unique<DoneWork>();
  }
  void barrier() override { exchange(""); }
  void shutdown() override {
    if (done_) return;
    done_ = true;
    // Rank 0's store (and its server) may go away only after every rank is done with it: each
    // rank counts itself out after the last exchange, the last one says so, rank 0 waits for that.
    exchange("");
    if (store_->add("shutdown/count", 1) == world_size_) store_->set("shutdown/all", "");
    if (rank_ == 0) store_->get("shutdown/all");
  }

 private:
  void check_avg(const Tensor& t, ReduceOp op, const char* what) {
    TC_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), ValueError,
             "tc.distributed.%s: op \"avg\" needs a floating-point tensor, got %s", what, dtype_name(t.dtype()));
  }

  // Every rank's `mine`, in rank order.
  std::vector<std::string> exchange(const std::string& mine) {
    uint64_t s = seq_++;
    std::string prefix = "c/" + std::to_string(s) + "/";
    store_->set(prefix + std::to_string(rank_), mine);
    std::vector<std::string> all(world_size_), keys;
    for (int r = 0; r < world_size_; r++) {
      keys.push_back(prefix + std::to_string(r));
      all[r] = r == rank_ ? mine : store_->get(keys.back());
    }
    finish(s, keys);
    return all;
  }

  // The last rank to finish collective `s` erases its keys.
  void finish(uint64_t s, const std::vector<std::string>& keys) {
    std::string counter = "c/" + std::to_string(s) + "/done";
    if (store_->add(counter, 1) == world_size_) {
      for (const std::string& k : keys) store_->erase(k);
      store_->erase(counter);
    }
  }

  // The reduction over ranks (in rank order, so every rank gets the same bits) of elements
  // [begin, begin + n) of each rank's buffer.
  Tensor reduce_block(const std::vector<std::string>& all, const Tensor& like, int64_t begin, int64_t n,
                      ReduceOp op) {
    size_t isz = like.itemsize();
    Tensor acc;
    for (const std::string& b : all) {
      TC_CHECK(b.size() >= (size_t)(begin + n) * isz, ValueError,
               "tc.distributed: ranks disagree on a collective's size");
      Tensor x = tensor_of(b.substr((size_t)begin * isz, (size_t)n * isz), like, n);
      acc = acc.defined() ? combine(acc, x, op) : x;
    }
    if (op == ReduceOp::Avg) acc = call1(Op::div, {acc, Tensor::scalar((double)world_size_, DType::Float64, true)});
    return acc;
  }

  std::shared_ptr<Store> store_;
  uint64_t seq_ = 0;
  bool done_ = false;
};

}  // namespace

std::shared_ptr<Store> Store::connect(const std::string& host, int port, bool is_master, double timeout_s) {
  TC_CHECK(port > 0 && port < 65536, ValueError, "tc.distributed: MASTER_PORT %d is not a port", port);
  return std::make_shared<TcpStore>(host, port, is_master, timeout_s);
}

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "avg") return ReduceOp::Avg;
  if (name == "max") return ReduceOp::Max;
  if (name == "min") return ReduceOp::Min;
  if (name == "product") return ReduceOp::Product;
  TC_FAIL(ValueError, "tc.distributed: unknown reduce op '%s' (sum, avg, max, min, product)", name.c_str());
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(const std::string& backend, std::shared_ptr<Store> store, int rank,
                                                   int world_size, double timeout_s) {
  TC_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ValueError,
           "tc.distributed.init_process_group: rank %d is not in [0, world_size=%d)", rank, world_size);
  if (backend == "gloo") return std::make_shared<StoreGroup>(std::move(store), rank, world_size);
  if (backend == "nccl") {
#ifdef TC_HAVE_CUDA
    return make_nccl_group(std::move(store), rank, world_size, timeout_s);
#else
    (void)timeout_s;
    TC_FAIL(DeviceError, "tc.distributed: backend \"nccl\" needs CUDA, and tc was built without the CUDA toolkit");
#endif
  }
  TC_FAIL(ValueError, "tc.distributed.init_process_group: unknown backend '%s' (nccl, gloo)", backend.c_str());
}

}  // namespace tc::dist
