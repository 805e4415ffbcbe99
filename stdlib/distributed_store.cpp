// tc.distributed's TCP store (distributed.h): the server rank 0 runs on a thread of its own
// process, and the client every rank talks to it with.
//
// Protocol (one request at a time per connection, answered in order):
//   request  = op:u8 keylen:u32 key valuelen:u64 value
//   response = status:u8 len:u64 bytes   (status 0: GET the value, ADD the new value as 8 bytes,
//                                         CHECK 1 byte, GATHER the parts, others empty;
//                                         status 1: an error message for the client to raise)
// A GET of a key not yet set is parked on the server until a SET or ADD gives it a value. HELLO
// (value: the rank, i32) says which rank a connection is; BYE that it leaves cleanly. When a
// rank's connection closes without BYE, the server fails every parked GET and GATHER, and every
// later one that would wait, with a message naming that rank: the others stop within a second
// instead of at the timeout. (That second, kLeftGrace, lets `tcrun --nproc-per-node` see the
// failed rank exit first and stop the others itself, so that it names the rank that failed.)
// GATHER's value is rank:u32 world:u32 timeout_ms:u32 labellen:u32 label data; the server answers
// every rank of a round at once, when the last one comes, with (labellen:u32 label datalen:u64
// data) per rank, or, when the round's timeout passes first, an error naming the ranks that did not
// come.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tc/distributed.h"
#include "tc/error.h"

namespace tc::dist {
namespace {

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCheck, kErase, kHello, kBye, kGather };
enum Status : uint8_t { kOk = 0, kFailed = 1 };

using Clock = std::chrono::steady_clock;
constexpr double kLeftGrace = 1.0;  // seconds from a rank's leaving to failing the others' waits

Clock::time_point deadline_after(double seconds) {
  seconds = std::min(seconds, 1e9);  // a timeout of math.huge: about 30 years
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
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

template <class T>
void put(std::string& m, T v) {
  m.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T take(const std::string& m, size_t& at) {
  T v{};
  if (at + sizeof v <= m.size()) std::memcpy(&v, m.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

std::string encode_request(Cmd cmd, const std::string& key, const std::string& value) {
  std::string m;
  m.push_back((char)cmd);
  put<uint32_t>(m, (uint32_t)key.size());
  m.append(key);
  put<uint64_t>(m, value.size());
  m.append(value);
  return m;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); i++) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// ---- server ------------------------------------------------------------------------------------
class StoreServer {
 public:
  explicit StoreServer(int listen_fd) : listen_fd_(listen_fd) {
    if (::pipe(wake_) != 0)
      TC_FAIL(DeviceError, "tc.distributed: pipe() failed: %s", std::strerror(errno));
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
    int rank = -1;   // from HELLO
    bool left = false;
  };
  struct Round {  // a GATHER round under one key
    uint32_t world = 0;
    std::vector<std::string> labels, data;
    std::vector<int> fds;  // -1: not come yet
    int come = 0;
    Clock::time_point deadline;
    double timeout_s = 0;
  };

  void reply(int fd, Status status, const std::string& bytes) {
    std::string m(1, (char)status);
    put<uint64_t>(m, bytes.size());
    m += bytes;
    if (!send_all(fd, m.data(), m.size())) drop_.push_back(fd);
  }

  void wake_waiters(const std::string& key) {
    auto range = waiting_.equal_range(key);
    for (auto it = range.first; it != range.second; ++it) reply(it->second, kOk, data_[key]);
    waiting_.erase(range.first, range.second);
  }

  // A rank left without BYE: every wait now, and every later one, fails with `why`.
  void abort(const std::string& why) {
    if (!aborted_.empty()) return;
    aborted_ = why;
    for (auto& [key, fd] : waiting_) reply(fd, kFailed, why);
    waiting_.clear();
    for (auto& [key, round] : rounds_)
      for (int fd : round.fds)
        if (fd >= 0) reply(fd, kFailed, why);
    rounds_.clear();
  }

  void gather(int fd, const std::string& key, const std::string& value) {
    size_t at = 0;
    uint32_t rank = take<uint32_t>(value, at), world = take<uint32_t>(value, at);
    uint32_t timeout_ms = take<uint32_t>(value, at), label_len = take<uint32_t>(value, at);
    if (at + label_len > value.size() || rank >= world)
      return reply(fd, kFailed, "a malformed gather request");
    if (!aborted_.empty()) return reply(fd, kFailed, aborted_);
    if (expired_.count(key))
      return reply(fd, kFailed,
                   "the other ranks stopped waiting for this collective: it timed out there");
    Round& r = rounds_[key];
    if (r.world == 0) {
      r.world = world;
      r.labels.resize(world);
      r.data.resize(world);
      r.fds.assign(world, -1);
      r.timeout_s = timeout_ms / 1000.0;
      r.deadline = deadline_after(r.timeout_s);
    }
    if (world != r.world || r.fds[rank] != -1) {
      std::string why = world != r.world
                            ? "the ranks disagree on the world size (" + std::to_string(r.world) +
                                  " and " + std::to_string(world) + ")"
                            : "two processes claim rank " + std::to_string(rank);
      for (int f : r.fds)
        if (f >= 0) reply(f, kFailed, why);
      rounds_.erase(key);
      return reply(fd, kFailed, why);
    }
    r.labels[rank] = value.substr(at, label_len);
    r.data[rank] = value.substr(at + label_len);
    r.fds[rank] = fd;
    if (++r.come < (int)r.world) return;
    std::string all;
    for (uint32_t i = 0; i < r.world; i++) {
      put<uint32_t>(all, (uint32_t)r.labels[i].size());
      all += r.labels[i];
      put<uint64_t>(all, r.data[i].size());
      all += r.data[i];
    }
    for (int f : r.fds)
      if (f >= 0) reply(f, kOk, all);
    rounds_.erase(key);
  }

  // Rounds whose timeout passed fail on the ranks that came; returns the poll timeout (ms) until
  // the next deadline, -1 for none.
  int expire_rounds() {
    auto now = Clock::now();
    auto next = Clock::time_point::max();
    if (!left_why_.empty()) {
      if (left_at_ <= now) {
        abort(left_why_);
        left_why_.clear();
      } else {
        next = left_at_;
      }
    }
    for (auto it = rounds_.begin(); it != rounds_.end();) {
      Round& r = it->second;
      if (r.deadline > now) {
        next = std::min(next, r.deadline);
        ++it;
        continue;
      }
      std::vector<int> missing;
      std::string came;
      for (uint32_t i = 0; i < r.world; i++) {
        if (r.fds[i] < 0)
          missing.push_back((int)i);
        else
          came += (came.empty() ? "" : "; ") + std::string("rank ") + std::to_string(i) +
                  " called " + r.labels[i];
      }
      char head[96];
      std::snprintf(head, sizeof head, "timed out after %.0f s: ", r.timeout_s);
      std::string why = head + rank_list(missing) + " never came (" + came +
                        "); a rank may be stuck, or the ranks run different collectives";
      for (int f : r.fds)
        if (f >= 0) reply(f, kFailed, why);
      expired_.insert(it->first);
      it = rounds_.erase(it);
    }
    if (next == Clock::time_point::max()) return -1;
    return (int)std::min<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 1 << 30);
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
          reply(fd, kOk, "");
          wake_waiters(key);
          break;
        case kGet: {
          auto it = data_.find(key);
          if (it != data_.end())
            reply(fd, kOk, it->second);
          else if (!aborted_.empty())
            reply(fd, kFailed, aborted_);
          else
            waiting_.emplace(key, fd);
          break;
        }
        case kAdd: {
          int64_t delta = 0, now = 0;
          std::memcpy(&delta, value.data(), std::min<size_t>(8, value.size()));
          auto it = data_.find(key);
          if (it != data_.end() && it->second.size() == 8) std::memcpy(&now, it->second.data(), 8);
          now += delta;
          data_[key] = std::string(reinterpret_cast<const char*>(&now), 8);
          reply(fd, kOk, data_[key]);
          wake_waiters(key);
          break;
        }
        case kCheck:
          reply(fd, kOk, std::string(1, data_.count(key) ? 1 : 0));
          break;
        case kErase:
          data_.erase(key);
          reply(fd, kOk, "");
          break;
        case kHello: {
          int32_t rank = -1;
          std::memcpy(&rank, value.data(), std::min<size_t>(4, value.size()));
          bool taken = false;
          for (auto& [f, other] : clients_)
            taken = taken || (f != fd && other.rank == rank && !other.left);
          if (taken) {
            reply(fd, kFailed,
                  "another process is already rank " + std::to_string(rank) +
                      " (two with one RANK?)");
          } else {
            c.rank = rank;
            reply(fd, kOk, "");
          }
          break;
        }
        case kBye:
          c.left = true;
          reply(fd, kOk, "");
          break;
        case kGather:
          gather(fd, key, value);
          break;
        default:
          drop_.push_back(fd);
          return;
      }
    }
  }

  void serve() {
    for (;;) {
      int timeout_ms = expire_rounds();
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto& [fd, _] : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
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
      while (!drop_.empty()) {
        int fd = drop_.back();
        drop_.pop_back();
        auto it = clients_.find(fd);
        if (it == clients_.end()) continue;
        Client gone = it->second;
        clients_.erase(it);
        for (auto w = waiting_.begin(); w != waiting_.end();)
          w = w->second == fd ? waiting_.erase(w) : ++w;
        for (auto& [key, round] : rounds_)
          for (int& f : round.fds)
            if (f == fd) f = -2;  // came, then went: nothing to answer
        ::close(fd);
        if (gone.rank >= 0 && !gone.left && aborted_.empty() && left_why_.empty()) {
          left_why_ = "rank " + std::to_string(gone.rank) +
                      " left the process group: its process failed, was killed or exited without "
                      "destroy_process_group";
          left_at_ = deadline_after(kLeftGrace);
        }
      }
    }
  }

  int listen_fd_;
  int wake_[2];
  std::thread thread_;
  std::map<int, Client> clients_;
  std::map<std::string, std::string> data_;
  std::multimap<std::string, int> waiting_;  // key -> client waiting in GET
  std::map<std::string, Round> rounds_;      // GATHER rounds not complete yet
  std::set<std::string> expired_;            // rounds that timed out
  std::string aborted_;                      // why every wait fails, once a rank left
  std::string left_why_;                     // a rank left: aborted_ from left_at_ on
  Clock::time_point left_at_;
  std::vector<int> drop_;
};

// ---- client ------------------------------------------------------------------------------------
sockaddr_storage resolve(const std::string& host, int port, socklen_t* len) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  TC_CHECK(rc == 0 && res, DeviceError, "tc.distributed: cannot resolve MASTER_ADDR '%s': %s",
           host.c_str(), gai_strerror(rc));
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return ss;
}

class TcpStore final : public Store {
 public:
  TcpStore(const std::string& host, int port, bool is_master, double timeout_s, int rank)
      : timeout_s_(timeout_s) {
    socklen_t len;
    sockaddr_storage addr = resolve(host, port, &len);
    if (is_master) {
      int lfd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(lfd, 1024) != 0) {
        int e = errno;
        ::close(lfd);
        TC_FAIL(DeviceError,
                "tc.distributed: the store cannot listen on %s:%d: %s (is MASTER_PORT in use?)",
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
               "tc.distributed: could not reach the store at %s:%d within %.0f s (%s); is rank 0 "
               "running?",
               host.c_str(), port, timeout_s, std::strerror(e));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (rank >= 0) {
      std::string r;
      put<int32_t>(r, rank);
      request(kHello, "", r, "tc.distributed.init_process_group", timeout_s_);
    }
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const std::string& value) override {
    request(kSet, key, value, "tc.distributed.store.set", timeout_s_);
  }
  std::string get(const std::string& key) override {
    return request(kGet, key, "", "tc.distributed.store.get('" + key + "')", timeout_s_);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::string d;
    put<int64_t>(d, delta);
    std::string r = request(kAdd, key, d, "tc.distributed.store.add", timeout_s_);
    size_t at = 0;
    return take<int64_t>(r, at);
  }
  bool check(const std::string& key) override {
    return request(kCheck, key, "", "tc.distributed.store.check", timeout_s_) == std::string(1, 1);
  }
  void erase(const std::string& key) override {
    request(kErase, key, "", "tc.distributed.store.erase", timeout_s_);
  }
  void leave() override {
    if (fd_ >= 0) request(kBye, "", "", "tc.distributed.destroy_process_group", timeout_s_);
  }

  std::vector<Part> gather(const std::string& key, int rank, int world_size,
                           const std::string& label, const std::string& value,
                           const std::string& what) override {
    std::string m;
    put<uint32_t>(m, (uint32_t)rank);
    put<uint32_t>(m, (uint32_t)world_size);
    put<uint32_t>(m, (uint32_t)std::min(timeout_s_ * 1000.0, 4e9));
    put<uint32_t>(m, (uint32_t)label.size());
    m += label;
    m += value;
    // the server answers at the round's deadline; wait a little longer for that answer
    std::string all = request(kGather, key, m, what, timeout_s_ + 10);
    std::vector<Part> parts(world_size);
    size_t at = 0;
    for (Part& p : parts) {
      uint32_t ll = take<uint32_t>(all, at);
      TC_CHECK(at + ll <= all.size(), DeviceError, "%s: a malformed answer from the store",
               what.c_str());
      p.label = all.substr(at, ll);
      at += ll;
      uint64_t dl = take<uint64_t>(all, at);
      TC_CHECK(at + dl <= all.size(), DeviceError, "%s: a malformed answer from the store",
               what.c_str());
      p.value = all.substr(at, dl);
      at += dl;
    }
    return parts;
  }

 private:
  // Reads exactly n bytes before `deadline`; DeviceError on timeout or a closed connection.
  void recv_all(void* buf, size_t n, Clock::time_point deadline, double wait_s,
                const std::string& what) {
    char* p = static_cast<char*>(buf);
    while (n > 0) {
      double left = seconds_left(deadline);
      if (left <= 0) {
        // the answer may still come and would be read as the next request's: drop the connection
        ::close(fd_);
        fd_ = -1;
        TC_FAIL(DeviceError, "%s: timed out after %.0f s", what.c_str(), wait_s);
      }
      pollfd pfd{fd_, POLLIN, 0};
      int r = ::poll(&pfd, 1, (int)std::min(left * 1000.0 + 1, 1e9));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) continue;
      ssize_t got = ::recv(fd_, p, n, 0);
      if (got < 0 && errno == EINTR) continue;
      TC_CHECK(
          got > 0, DeviceError,
          "%s: rank 0 (which serves the store) is gone: its process failed, was killed or exited",
          what.c_str());
      p += got;
      n -= (size_t)got;
    }
  }

  std::string request(Cmd cmd, const std::string& key, const std::string& value,
                      const std::string& what, double wait_s) {
    std::lock_guard<std::mutex> lock(mu_);
    TC_CHECK(fd_ >= 0, DeviceError,
             "%s: the connection to the store was dropped after an earlier timeout", what.c_str());
    std::string m = encode_request(cmd, key, value);
    TC_CHECK(
        send_all(fd_, m.data(), m.size()), DeviceError,
        "%s: rank 0 (which serves the store) is gone: its process failed, was killed or exited",
        what.c_str());
    auto deadline = deadline_after(wait_s);
    char head[9];
    recv_all(head, 9, deadline, wait_s, what);
    uint64_t n;
    std::memcpy(&n, head + 1, 8);
    std::string out(n, '\0');
    if (n) recv_all(out.data(), n, deadline, wait_s, what);
    TC_CHECK(head[0] == kOk, DeviceError, "%s: %s", what.c_str(), out.c_str());
    return out;
  }

  double timeout_s_;
  std::unique_ptr<StoreServer> server_;  // declared before fd_ is closed: destroyed last
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace

std::shared_ptr<Store> Store::connect(const std::string& host, int port, bool is_master,
                                      double timeout_s, int rank) {
  TC_CHECK(port > 0 && port < 65536, ValueError, "tc.distributed: MASTER_PORT %d is not a port",
           port);
  return std::make_shared<TcpStore>(host, port, is_master, timeout_s, rank);
}

}  // namespace tc::dist
