// The channel between the launchers of a `tcrun --nnodes N` run (launcher.h says how it works):
// node 0's launcher serves it on --master-port, every other launcher connects to it.
#pragma once
#include <csignal>
#include <optional>
#include <string>
#include <vector>

namespace tc::vm {

// What stops a run: a rank that failed, or a launcher (a signal, a lost connection).
struct Failure {
  int node = 0;
  int rank = -1;     // the global rank; -1: the launcher itself
  int code = 1;      // the exit status tcrun gives for it
  std::string what;  // "exited with code 3", "was killed by signal Killed", "got Interrupt", ...
  std::string who() const;  // "rank 3 on node 1", "node 1's launcher"
};

class NodeChannel {
 public:
  // `signal`: set by the launcher's SIGINT/SIGTERM handler; waits give up when it is.
  NodeChannel(int nnodes, int node_rank, int nproc, std::string addr, int port, double timeout_s,
              const volatile sig_atomic_t* signal);
  ~NodeChannel();
  NodeChannel(const NodeChannel&) = delete;
  NodeChannel& operator=(const NodeChannel&) = delete;

  // The static rendezvous: node 0 waits for every node, checks that they agree and picks the
  // ranks' store port; the others connect and receive it. Returns 0 and sets *store_port, or
  // prints why not and returns tcrun's exit status.
  int rendezvous(int* store_port);
  // Waits up to `ms` for messages; returns the failure another node reported (or a lost
  // connection), once.
  std::optional<Failure> poll(int ms);
  void report_failure(const Failure& f);  // this node's: to node 0, which tells every node
  void report_done();                     // this node's ranks all exited 0
  bool all_done() const;                  // every node's ranks exited 0

 private:
  struct Conn {
    int fd = -1;
    std::string in;    // received bytes, not yet a whole line
    std::string peer;  // its address, for messages
    enum State { kRunning, kDone, kFailed, kClosed } state = kRunning;
  };
  int rendezvous_node0(int* store_port);
  int rendezvous_other(int* store_port);
  std::optional<Failure> poll_node0(int ms);
  std::optional<Failure> poll_other(int ms);
  void maybe_end();

  int nnodes_, node_rank_, nproc_;
  std::string addr_;
  int port_;
  double timeout_s_;
  const volatile sig_atomic_t* signal_;
  int listen_fd_ = -1;
  std::vector<Conn> nodes_;  // node 0: nodes_[k] is node k's launcher (nodes_[0] unused); others: nodes_[0]
  std::vector<Conn> late_;   // node 0: launchers that connected after the rendezvous
  bool failed_ = false, local_done_ = false, ended_ = false;
};

}  // namespace tc::vm
