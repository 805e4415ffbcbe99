// tcrun --nproc-per-node G [--nnodes N ...]: starts G copies of tcrun (this executable, without
// the launcher's options) with torchrun's environment, waits for them, and stops them all when
// one fails, here or (several nodes) on another node.
#include "launcher.h"

#include "launcher_nodes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tc::vm {
namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// A port the kernel says is free now (bind to port 0); 29500 if that fails.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 29500;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int launch_ranks(const LaunchOptions& o, const std::vector<std::string>& child_args) {
  if (o.nproc < 1) {
    std::fprintf(stderr, "tcrun: --nproc-per-node must be at least 1\n");
    return 2;
  }
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    std::fprintf(stderr, "tcrun: --node-rank %d is not in 0..%d (--nnodes %d)\n", o.node_rank, o.nnodes - 1, o.nnodes);
    return 2;
  }
  const bool several = o.nnodes > 1;
  std::string addr = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  int store_port = o.master_port > 0 ? o.master_port : 0;
  std::unique_ptr<NodeChannel> nodes;
  if (several) {
    nodes = std::make_unique<NodeChannel>(o.nnodes, o.node_rank, o.nproc, addr, o.master_port > 0 ? o.master_port : 29500,
                                          o.rdzv_timeout_s, &g_signal);
    if (int rc = nodes->rendezvous(&store_port)) return rc;
  } else if (store_port == 0) {
    store_port = free_port();
  }

  std::vector<pid_t> pids(o.nproc, -1);
  const pid_t launcher = ::getpid();
  for (int r = 0; r < o.nproc; r++) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("tcrun: fork");
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
      if (nodes) nodes->report_failure(Failure{o.node_rank, -1, 1, "could not start its ranks"});
      return 1;
    }
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher died: stop too
      if (::getppid() != launcher) std::_Exit(128 + SIGTERM);
      auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
      set("RANK", std::to_string(o.node_rank * o.nproc + r));
      set("LOCAL_RANK", std::to_string(r));
      set("GROUP_RANK", std::to_string(o.node_rank));
      set("WORLD_SIZE", std::to_string(o.nnodes * o.nproc));
      set("LOCAL_WORLD_SIZE", std::to_string(o.nproc));
      set("MASTER_ADDR", addr);
      set("MASTER_PORT", std::to_string(store_port));
      std::vector<char*> argv;
      std::string self = "/proc/self/exe";
      argv.push_back(const_cast<char*>(o.argv0.c_str()));
      for (const std::string& a : child_args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(self.c_str(), argv.data());
      std::fprintf(stderr, "tcrun: cannot start rank %d: %s\n", o.node_rank * o.nproc + r, std::strerror(errno));
      std::_Exit(127);
    }
    pids[r] = pid;
  }

  // Wait; on the first failure here, another node's (several nodes) or a signal to us, stop the
  // ranks: SIGTERM, then SIGKILL after a grace period.
  int live = o.nproc;
  std::optional<Failure> first;
  bool done_said = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  auto stop = [&] {
    stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (pid_t p : pids)
      if (p > 0) ::kill(p, SIGTERM);
  };
  auto ranks = [](int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); };
  for (;;) {
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      int r = -1;
      for (int k = 0; k < o.nproc; k++)
        if (pids[k] == pid) r = k;
      if (r < 0) continue;
      pids[r] = -1;
      live--;
      if (first || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) continue;
      first = Failure{o.node_rank, o.node_rank * o.nproc + r, exit_code(status), describe(status)};
      if (!several) {
        std::fprintf(stderr, "tcrun: rank %d (pid %d) %s", r, (int)pid, first->what.c_str());
        if (live > 0) std::fprintf(stderr, "; stopping the other %s", ranks(live).c_str());
      } else {
        std::fprintf(stderr, "tcrun: rank %d (node %d, local rank %d, pid %d) %s; stopping %severy other node's ranks",
                     first->rank, o.node_rank, r, (int)pid, first->what.c_str(),
                     live > 0 ? ("the other " + ranks(live) + " on this node and ").c_str() : "");
      }
      std::fprintf(stderr, "\n");
      stop();
      if (nodes) nodes->report_failure(*first);
    }
    if (g_signal && !first) {
      first = Failure{o.node_rank, -1, 128 + g_signal, std::string("got ") + strsignal(g_signal)};
      std::fprintf(stderr, "tcrun: %s: stopping %s%s\n", strsignal(g_signal), ranks(live).c_str(),
                   several ? " on this node and every other node's ranks" : "");
      stop();
      if (nodes) nodes->report_failure(*first);
    }
    if (live == 0 && !first && nodes && !done_said) {
      nodes->report_done();
      done_said = true;
    }
    if (live == 0 && (first || !nodes || nodes->all_done())) break;
    if (nodes) {
      if (std::optional<Failure> f = nodes->poll(10); f && !first) {
        first = f;
        std::fprintf(stderr, "tcrun: %s %s; ", f->who().c_str(), f->what.c_str());
        if (live > 0) std::fprintf(stderr, "stopping the %s on this node (node %d)\n", ranks(live).c_str(), o.node_rank);
        else std::fprintf(stderr, "the ranks on this node (node %d) had finished\n", o.node_rank);
        stop();
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (std::chrono::steady_clock::now() > stop_deadline) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
  }
  return first ? first->code : 0;
}

}  // namespace tc::vm
