// The launchers' channel of a multi-node tcrun run: a line protocol over TCP (launcher.h).
//   other -> node 0   HELLO 1 <node rank> <nnodes> <nproc per node>
//   node 0 -> other   START <store port>  |  ERROR <exit status> <message>
//   other -> node 0   DONE  |  FAIL <node> <rank> <code> <what>
//   node 0 -> other   END   |  STOP <node> <rank> <code> <what>
#include "launcher_nodes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

namespace tc::vm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kHello = "HELLO 1";

Clock::time_point deadline_after(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : ms > 1 << 30 ? 1 << 30 : (int)ms;
}

bool resolve(const std::string& host, int port, sockaddr_storage* ss, socklen_t* len, std::string* err) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || !res) {
    *err = "cannot resolve '" + host + "': " + gai_strerror(rc);
    return false;
  }
  std::memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return true;
}

// A dead machine shows as a dropped connection within about 90 s.
void keepalive(int fd) {
  int one = 1, idle = 30, intvl = 10, cnt = 6;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

std::string peer_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[NI_MAXHOST] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
    ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  return host;
}

bool send_line(int fd, const std::string& line) {
  std::string s = line + "\n";
  for (size_t off = 0; off < s.size();) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += n;
  }
  return true;
}

// Reads what `fd` has (poll said it is readable) and appends its whole lines; false at the end
// of the stream or an error.
bool read_lines(int fd, std::string& in, std::vector<std::string>* lines) {
  char buf[4096];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  in.append(buf, n);
  for (size_t p; (p = in.find('\n')) != std::string::npos; in.erase(0, p + 1)) lines->push_back(in.substr(0, p));
  return in.size() < 65536;  // a peer that never ends a line is not a launcher
}

// Closes after reading what the peer sent, so that the close does not reset the connection and
// lose what we sent last.
void close_conn(int& fd) {
  if (fd < 0) return;
  ::shutdown(fd, SHUT_WR);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  char buf[4096];
  while (::recv(fd, buf, sizeof buf, 0) > 0) {
  }
  ::close(fd);
  fd = -1;
}

// A connection to host:port within `ms` (-1 and *err on failure).
int connect_within(const sockaddr_storage& ss, socklen_t len, int ms, std::string* err) {
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return *err = std::strerror(errno), -1;
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int e = 0;
    socklen_t el = sizeof e;
    if (::poll(&p, 1, ms) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0) {
      rc = e == 0 ? 0 : -1;
      errno = e;
    } else {
      errno = ETIMEDOUT;
    }
  }
  if (rc != 0) {
    *err = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  keepalive(fd);
  return fd;
}

// "FAIL/STOP <node> <rank> <code> <what>" -> Failure
std::optional<Failure> parse_failure(const std::string& line) {
  std::istringstream s(line.substr(5));
  Failure f;
  if (!(s >> f.node >> f.rank >> f.code)) return std::nullopt;
  std::getline(s >> std::ws, f.what);
  return f;
}

std::string failure_line(const char* verb, const Failure& f) {
  return std::string(verb) + " " + std::to_string(f.node) + " " + std::to_string(f.rank) + " " +
         std::to_string(f.code) + " " + f.what;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

}  // namespace

std::string Failure::who() const {
  return rank >= 0 ? "rank " + std::to_string(rank) + " on node " + std::to_string(node)
                   : "node " + std::to_string(node) + "'s launcher";
}

NodeChannel::NodeChannel(int nnodes, int node_rank, int nproc, std::string addr, int port, double timeout_s,
                         const volatile sig_atomic_t* signal)
    : nnodes_(nnodes), node_rank_(node_rank), nproc_(nproc), addr_(std::move(addr)), port_(port),
      timeout_s_(timeout_s), signal_(signal) {}

NodeChannel::~NodeChannel() {
  for (Conn& c : nodes_) close_conn(c.fd);
  for (Conn& c : late_) close_conn(c.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

int NodeChannel::rendezvous(int* store_port) {
  return node_rank_ == 0 ? rendezvous_node0(store_port) : rendezvous_other(store_port);
}

int NodeChannel::rendezvous_node0(int* store_port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string err;
  if (!resolve(addr_, port_, &ss, &len, &err)) {
    std::fprintf(stderr, "tcrun: node 0: --master-addr: %s\n", err.c_str());
    return 1;
  }
  // On every interface, as torchrun's store: a name that resolves to a loopback address here
  // (Debian's 127.0.1.1 for the host's own name) still reaches node 0 from the other machines.
  sockaddr_storage any = ss;
  if (any.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&any)->sin_addr.s_addr = htonl(INADDR_ANY);
  if (any.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&any)->sin6_addr = in6addr_any;
  listen_fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&any), len) != 0 || ::listen(listen_fd_, 128) != 0) {
    std::fprintf(stderr, "tcrun: node 0 cannot listen on port %d for the other nodes' launchers: %s (another node 0 or another program on it?)\n",
                 port_, std::strerror(errno));
    return 1;
  }
  nodes_.assign(nnodes_, Conn{});
  std::vector<Conn> pending;  // connected, no HELLO yet
  auto deadline = deadline_after(timeout_s_);
  int joined = 0, code = 0;
  std::string error;
  while (joined < nnodes_ - 1 && error.empty()) {
    if (*signal_) {
      error = std::string("node 0's launcher got ") + strsignal(*signal_), code = 128 + *signal_;
      break;
    }
    if (ms_left(deadline) == 0) {
      std::vector<int> missing;
      for (int k = 1; k < nnodes_; k++)
        if (nodes_[k].fd < 0) missing.push_back(k);
      error = std::string("node rank") + (missing.size() > 1 ? "s " : " ") + list(missing) + " of " +
              std::to_string(nnodes_) + " did not join within " + seconds(timeout_s_) +
              " (node 0 waits on " + addr_ + ":" + std::to_string(port_) +
              "; start each with its --node-rank and the same --nnodes, --master-addr and --master-port)";
      code = 1;
      break;
    }
    // fds: the listening socket, then the joined nodes' connections, then the pending ones
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    std::vector<int> joined_nodes;
    for (int k = 1; k < nnodes_; k++)
      if (nodes_[k].fd >= 0) fds.push_back({nodes_[k].fd, POLLIN, 0}), joined_nodes.push_back(k);
    for (Conn& c : pending) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), std::min(ms_left(deadline), 100)) <= 0) continue;
    // a joined node sends nothing until START: anything (its end) means it left
    for (size_t i = 0; i < joined_nodes.size(); i++) {
      Conn& c = nodes_[joined_nodes[i]];
      std::vector<std::string> lines;
      if (fds[1 + i].revents && (!read_lines(c.fd, c.in, &lines) || !lines.empty())) {
        std::fprintf(stderr, "tcrun: node 0: node %d's launcher (%s) left during the rendezvous\n", joined_nodes[i],
                     c.peer.c_str());
        close_conn(c.fd);
        joined--;
      }
    }
    for (size_t i = 0; i < pending.size() && error.empty(); i++) {
      Conn& c = pending[i];
      if (!fds[1 + joined_nodes.size() + i].revents) continue;
      std::vector<std::string> lines;
      bool open = read_lines(c.fd, c.in, &lines);
      if (lines.empty()) {
        if (!open) close_conn(c.fd);
        continue;
      }
      std::istringstream s(lines[0]);
      std::string hello, version;
      int r = -1, n = 0, g = 0;
      if (!(s >> hello >> version >> r >> n >> g) || hello + " " + version != kHello) {
        std::fprintf(stderr, "tcrun: node 0: ignoring a connection from %s that is not a tcrun launcher's\n", c.peer.c_str());
        close_conn(c.fd);
        continue;
      }
      std::string who = "the launcher from " + c.peer + " (node rank " + std::to_string(r) + ")";
      if (n != nnodes_)
        error = who + " has --nnodes " + std::to_string(n) + ", node 0 has " + std::to_string(nnodes_);
      else if (g != nproc_)
        error = who + " has --nproc-per-node " + std::to_string(g) + ", node 0 has " + std::to_string(nproc_);
      else if (r <= 0 || r >= nnodes_)
        error = "two launchers have node rank 0 (node 0 and " + c.peer + ")";
      else if (nodes_[r].fd >= 0)
        error = "two launchers have node rank " + std::to_string(r) + " (from " + nodes_[r].peer + " and " + c.peer + ")";
      if (!error.empty()) {
        code = 2;
        nodes_.push_back(std::move(c));  // told below, with the others
      } else {
        nodes_[r] = std::move(c);
        joined++;
      }
      c.fd = -1;
    }
    std::erase_if(pending, [](const Conn& c) { return c.fd < 0; });
    if (fds[0].revents) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        keepalive(fd);
        pending.push_back(Conn{fd, "", peer_of(fd)});
      }
    }
  }
  for (Conn& c : pending) close_conn(c.fd);
  if (!error.empty()) {
    std::fprintf(stderr, "tcrun: the nodes' rendezvous failed: %s\n", error.c_str());
    for (Conn& c : nodes_)
      if (c.fd >= 0) send_line(c.fd, "ERROR " + std::to_string(code) + " " + error);
    return code;
  }
  // The ranks' store: a port free on node 0's address now, never the launchers' own.
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  reinterpret_cast<sockaddr_in*>(&ss)->sin_port = 0;  // sin6_port is at the same offset
  socklen_t l = len;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &l) != 0) {
    std::fprintf(stderr, "tcrun: node 0 cannot find a free port for the ranks' store on %s: %s\n", addr_.c_str(),
                 std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return 1;
  }
  *store_port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  ::close(fd);
  for (int k = 1; k < nnodes_; k++) send_line(nodes_[k].fd, "START " + std::to_string(*store_port));
  return 0;
}

int NodeChannel::rendezvous_other(int* store_port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string err;
  auto deadline = deadline_after(timeout_s_);
  int fd = -1;
  auto interrupted = [&] {
    std::fprintf(stderr, "tcrun: node %d: %s during the nodes' rendezvous\n", node_rank_, strsignal(*signal_));
    return 128 + *signal_;
  };
  while (fd < 0) {
    if (*signal_) return interrupted();
    if (resolve(addr_, port_, &ss, &len, &err)) fd = connect_within(ss, len, std::min(ms_left(deadline), 2000), &err);
    if (fd >= 0) break;
    if (ms_left(deadline) == 0) {
      std::fprintf(stderr,
                   "tcrun: node %d could not reach node 0's launcher at %s:%d within %s (%s); is node 0 "
                   "started with the same --master-addr and --master-port?\n",
                   node_rank_, addr_.c_str(), port_, seconds(timeout_s_).c_str(), err.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms_left(deadline), 100)));
  }
  nodes_.assign(1, Conn{fd, "", addr_});
  Conn& c = nodes_[0];
  send_line(fd, std::string(kHello) + " " + std::to_string(node_rank_) + " " + std::to_string(nnodes_) + " " +
                    std::to_string(nproc_));
  // Node 0 answers when every node has joined, or with why the rendezvous failed (its timeout).
  std::vector<std::string> lines;
  while (lines.empty()) {
    if (*signal_) return interrupted();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (!read_lines(fd, c.in, &lines) && lines.empty()) {
      std::fprintf(stderr, "tcrun: node %d: node 0's launcher at %s:%d closed the connection during the rendezvous\n",
                   node_rank_, addr_.c_str(), port_);
      return 1;
    }
  }
  std::istringstream s(lines[0]);
  std::string verb;
  int value = 0;
  s >> verb >> value;
  if (verb == "START" && value > 0 && value < 65536) {
    *store_port = value;
    return 0;
  }
  if (verb == "ERROR" && value > 0) {
    std::string msg;
    std::getline(s >> std::ws, msg);
    std::fprintf(stderr, "tcrun: node %d: the nodes' rendezvous failed: %s\n", node_rank_, msg.c_str());
    return value;
  }
  std::fprintf(stderr, "tcrun: node %d: %s:%d answered '%s', not as node 0's tcrun launcher would\n", node_rank_,
               addr_.c_str(), port_, lines[0].c_str());
  return 1;
}

std::optional<Failure> NodeChannel::poll(int ms) { return node_rank_ == 0 ? poll_node0(ms) : poll_other(ms); }

std::optional<Failure> NodeChannel::poll_other(int ms) {
  Conn& c = nodes_[0];
  if (c.fd < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return std::nullopt;
  }
  pollfd p{c.fd, POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return std::nullopt;
  std::vector<std::string> lines;
  bool open = read_lines(c.fd, c.in, &lines);
  std::optional<Failure> f;
  for (const std::string& line : lines) {
    if (line == "END") ended_ = true;
    else if (line.rfind("STOP ", 0) == 0 && !f) f = parse_failure(line);
  }
  if (!open) {
    close_conn(c.fd);
    if (!f && !ended_) f = Failure{0, -1, 1, "closed the connection"};
  }
  if (!f || failed_) return std::nullopt;
  failed_ = true;
  return f;
}

std::optional<Failure> NodeChannel::poll_node0(int ms) {
  std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
  for (Conn& c : nodes_)
    if (c.fd >= 0) fds.push_back({c.fd, POLLIN, 0});
  for (Conn& c : late_) fds.push_back({c.fd, POLLIN, 0});
  if (::poll(fds.data(), fds.size(), ms) <= 0) return std::nullopt;
  std::optional<Failure> first;
  for (size_t i = 1; i < fds.size(); i++) {
    if (!fds[i].revents) continue;
    for (int k = 1; k < nnodes_; k++) {
      Conn& c = nodes_[k];
      if (c.fd != fds[i].fd) continue;
      std::vector<std::string> lines;
      bool open = read_lines(c.fd, c.in, &lines);
      std::optional<Failure> f;
      for (const std::string& line : lines) {
        if (line == "DONE" && c.state == Conn::kRunning) c.state = Conn::kDone;
        else if (line.rfind("FAIL ", 0) == 0 && !f) f = parse_failure(line), c.state = Conn::kFailed;
      }
      if (!open) {
        close_conn(c.fd);
        if (c.state == Conn::kRunning) f = Failure{k, -1, 1, "closed the connection"}, c.state = Conn::kFailed;
      }
      if (f && !failed_ && !first) {
        first = f;
        for (int j = 1; j < nnodes_; j++)
          if (j != k && nodes_[j].fd >= 0) send_line(nodes_[j].fd, failure_line("STOP", *f));
      }
    }
    // A launcher that comes after the rendezvous (a late or duplicate node) is told so.
    for (Conn& c : late_) {
      if (c.fd != fds[i].fd) continue;
      std::vector<std::string> lines;
      bool open = read_lines(c.fd, c.in, &lines);
      if (!lines.empty())
        send_line(c.fd, "ERROR 2 the " + std::to_string(nnodes_) + " nodes met already and their ranks are running (" +
                            c.peer + " joined late or with a node rank that another node has)");
      if (!open || !lines.empty()) close_conn(c.fd);
    }
  }
  std::erase_if(late_, [](const Conn& c) { return c.fd < 0; });
  if (fds[0].revents) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) late_.push_back(Conn{fd, "", peer_of(fd)});
  }
  if (first) failed_ = true;
  maybe_end();
  return first;
}

void NodeChannel::report_failure(const Failure& f) {
  if (failed_) return;
  failed_ = true;
  if (node_rank_ != 0) {
    if (nodes_[0].fd >= 0) send_line(nodes_[0].fd, failure_line("FAIL", f));
    return;
  }
  for (int k = 1; k < nnodes_; k++)
    if (nodes_[k].fd >= 0) send_line(nodes_[k].fd, failure_line("STOP", f));
}

void NodeChannel::report_done() {
  local_done_ = true;
  if (node_rank_ != 0 && nodes_[0].fd >= 0) send_line(nodes_[0].fd, "DONE");
  maybe_end();
}

// Node 0: when every node's ranks exited 0, END tells them (they wait for it, so that a later
// failure anywhere still fails every launcher).
void NodeChannel::maybe_end() {
  if (node_rank_ != 0 || ended_ || failed_ || !local_done_) return;
  for (int k = 1; k < nnodes_; k++)
    if (nodes_[k].state != Conn::kDone) return;
  for (int k = 1; k < nnodes_; k++)
    if (nodes_[k].fd >= 0) send_line(nodes_[k].fd, "END");
  ended_ = true;
}

bool NodeChannel::all_done() const { return ended_; }

}  // namespace tc::vm
