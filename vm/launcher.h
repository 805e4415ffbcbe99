// tcrun's multi-process launcher (torchrun with its static rendezvous):
//
//   tcrun --nproc-per-node G script.lua                                         (one machine)
//   tcrun --nnodes N --node-rank R --master-addr A --master-port P --nproc-per-node G script.lua
//
// runs G ranks of `tcrun script.lua` on this node with RANK = R*G + local rank, LOCAL_RANK,
// GROUP_RANK = R, WORLD_SIZE = N*G, LOCAL_WORLD_SIZE = G, MASTER_ADDR and MASTER_PORT (the
// address of the ranks' TCP store, served by rank 0) set.
//
// One node (N = 1): MASTER_ADDR:MASTER_PORT is --master-addr (default 127.0.0.1) and
// --master-port (default: a port free at launch). When a rank fails, the others get SIGTERM
// (SIGKILL 5 s later), the failure is reported on stderr, and the exit status is the failed
// rank's (128 + signal for a killed one).
//
// Several nodes (N > 1), launcher_nodes.{h,cpp}: node 0's launcher listens (every interface) on
// --master-port (default 29500, torchrun's) for the other launchers, which connect to
// --master-addr (default 127.0.0.1), retrying until --rdzv-timeout (default 300 s). Node 0 waits
// for all N (the static rendezvous; past the timeout it gives up naming the node ranks that never
// came), checks that they agree on --nnodes and --nproc-per-node and that no node rank comes
// twice (else every launcher that joined stops with that error, status 2), then picks a port
// free on its address for the ranks' store and sends it to every node: the ranks' MASTER_PORT is
// that port, never the launchers' own, so the two never collide. Then every node starts its ranks and the
// connections stay open:
// - a launcher whose rank fails (or that gets SIGINT/SIGTERM) stops its ranks and tells node 0,
//   which tells every other node; each stops its ranks (SIGTERM, SIGKILL 5 s later). Every
//   launcher prints which rank on which node failed first and exits with that rank's status
//   (the same code on every node; 128 + signal for a killed rank or a signalled launcher).
// - a launcher whose connection drops (node 0's, or at node 0 another node's, before that node
//   said its ranks were done) takes it as a failure of that launcher: it stops its ranks and
//   exits 1. TCP keepalive finds a dead machine within about 90 s.
// - when a node's ranks all exit 0 it says so and waits; when every node's have, node 0 tells
//   them all and every launcher exits 0. A failure anywhere before that fails every launcher.
// Each rank is started with PR_SET_PDEATHSIG, so it gets SIGTERM if its launcher dies.
#pragma once
#include <string>
#include <vector>

namespace tc::vm {

struct LaunchOptions {
  int nproc = 0;               // ranks on this node
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;     // default 127.0.0.1
  int master_port = 0;         // default: a free port (one node), 29500 (several)
  double rdzv_timeout_s = 300; // several nodes: how long they may take to meet
  std::string argv0;           // the ranks' argv[0]
};

// Runs the ranks with `child_args` (tcrun's options and script, without the launcher's own) and
// returns tcrun's exit status.
int launch_ranks(const LaunchOptions& o, const std::vector<std::string>& child_args);

}  // namespace tc::vm
