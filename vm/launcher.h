// tcrun's multi-process launcher (torchrun's single-node part): `tcrun --nproc-per-node N
// script.lua` runs N ranks of `tcrun script.lua` with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. When a rank fails, the others get SIGTERM
// (SIGKILL 5 s later), the failure is reported on stderr, and the exit status is the failed
// rank's (128 + signal for a killed one).
#pragma once
#include <string>
#include <vector>

namespace tc::vm {

struct LaunchOptions {
  int nproc = 0;
  std::string master_addr;  // default 127.0.0.1
  int master_port = 0;      // default: a free port
  std::string argv0;        // the ranks' argv[0]
};

// Runs the ranks with `child_args` (tcrun's options and script, without the launcher's own) and
// returns tcrun's exit status.
int launch_ranks(const LaunchOptions& o, const std::vector<std::string>& child_args);

}  // namespace tc::vm
