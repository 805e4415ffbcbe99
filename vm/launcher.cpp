// tcrun --nproc-per-node N: starts N copies of tcrun (this executable, without the launcher's
// options) with torchrun's environment, waits for them, and stops the others when one fails.
#include "launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  std::string addr = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
  int port = o.master_port > 0 ? o.master_port : free_port();

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<pid_t> pids(o.nproc, -1);
  for (int r = 0; r < o.nproc; r++) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("tcrun: fork");
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
      return 1;
    }
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
      set("RANK", std::to_string(r));
      set("LOCAL_RANK", std::to_string(r));
      set("GROUP_RANK", "0");
      set("WORLD_SIZE", std::to_string(o.nproc));
      set("LOCAL_WORLD_SIZE", std::to_string(o.nproc));
      set("MASTER_ADDR", addr);
      set("MASTER_PORT", std::to_string(port));
      std::vector<char*> argv;
      std::string self = "/proc/self/exe";
      argv.push_back(const_cast<char*>(o.argv0.c_str()));
      for (const std::string& a : child_args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(self.c_str(), argv.data());
      std::fprintf(stderr, "tcrun: cannot start rank %d: %s\n", r, std::strerror(errno));
      std::_Exit(127);
    }
    pids[r] = pid;
  }

  // Wait; on the first failure (or a signal to us), stop the others: SIGTERM, then SIGKILL after
  // a grace period.
  int live = o.nproc, result = 0;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (live > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int rank = -1;
      for (int r = 0; r < o.nproc; r++)
        if (pids[r] == pid) rank = r;
      if (rank < 0) continue;
      pids[rank] = -1;
      live--;
      bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && !stopping) {
        result = exit_code(status);
        std::fprintf(stderr, "tcrun: rank %d (pid %d) %s", rank, (int)pid, describe(status).c_str());
        if (live > 0) std::fprintf(stderr, "; stopping the other %d rank%s", live, live == 1 ? "" : "s");
        std::fprintf(stderr, "\n");
        stopping = true;
        stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        for (pid_t p : pids)
          if (p > 0) ::kill(p, SIGTERM);
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (g_signal && !stopping) {
      std::fprintf(stderr, "tcrun: %s: stopping %d rank%s\n", strsignal(g_signal), live, live == 1 ? "" : "s");
      result = 128 + g_signal;
      stopping = true;
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return result;
}

}  // namespace tc::vm
