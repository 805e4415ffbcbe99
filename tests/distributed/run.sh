#!/usr/bin/env bash
# tc.distributed and `tcrun --nproc-per-node` (issue 15), without a GPU: the launcher's
# environment, exit statuses and failure handling, on one node and on two (issue 29: two
# launchers on this machine, gloo), the TCP store and every collective on the
# gloo (CPU) backend, and the clear error for nccl where NCCL or a GPU is missing.
# Usage: tests/distributed/run.sh path/to/tcrun [cuda]   (cuda: the collectives on nccl too)
set -uo pipefail
cd "$(dirname "$0")/../.."
TCRUN=${1:?usage: run.sh path/to/tcrun [cuda]}
# the launcher reads these when its options are absent (several nodes): none may leak in
unset NNODES NODE_RANK MASTER_ADDR MASTER_PORT PET_NNODES PET_NODE_RANK PET_MASTER_ADDR PET_MASTER_PORT SLURM_NNODES SLURM_NODEID
fails=0
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
pass() { echo "pass  $1"; }
fail() { echo "FAIL  $1"; shift; printf '%s\n' "$@" | sed 's/^/      /'; fails=$((fails + 1)); }

# 1. every rank gets torchrun's environment and the script's arguments
if out=$("$TCRUN" --nproc-per-node 2 --master-port 29731 tests/distributed/env.lua a b 2>&1) &&
   grep -q "env RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29731 args=a,b" <<<"$out" &&
   grep -q "env RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 " <<<"$out"; then
  pass "launcher_sets_rank_environment_and_passes_arguments"
else fail "launcher_sets_rank_environment_and_passes_arguments" "$out"; fi

# 2. a rank's exit status becomes tcrun's
"$TCRUN" --nproc-per-node 3 tests/distributed/env.lua >"$t/out" 2>"$t/err"; rc=$?
if [ $rc -eq 3 ] && grep -q "rank 2 (pid [0-9]*) exited with code 3" "$t/err"; then
  pass "launcher_exit_status_is_the_failed_ranks"
else fail "launcher_exit_status_is_the_failed_ranks" "rc=$rc" "$(cat "$t/err")"; fi

# 3. a failing rank stops the others (rank 0 would wait in a barrier forever) and its error shows
start=$(date +%s)
timeout 60 "$TCRUN" --nproc-per-node 3 tests/distributed/fail_one_rank.lua >"$t/out" 2>"$t/err"; rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -eq 1 ] && grep -q "fail_one_rank.lua:5: rank one gives up" "$t/err" &&
   grep -q "rank 1 (pid [0-9]*) exited with code 1; stopping the other 2 ranks" "$t/err" && [ $took -lt 30 ] &&
   ! grep -q unreachable "$t/out"; then
  pass "launcher_failing_rank_stops_the_others"
else fail "launcher_failing_rank_stops_the_others" "rc=$rc took=${took}s" "$(cat "$t/err")"; fi

# 4. bad usage
"$TCRUN" --nproc-per-node zero tests/distributed/env.lua >/dev/null 2>"$t/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "nproc-per-node takes a positive integer" "$t/err"; then
  pass "launcher_rejects_a_bad_process_count"
else fail "launcher_rejects_a_bad_process_count" "rc=$rc" "$(cat "$t/err")"; fi

# 4b-4h. several nodes (issue 29): two launchers on this machine, as two machines would run them.
# two_nodes PORT ARGS...: `tcrun --nnodes 2 --node-rank R --master-port PORT ARGS...` for R = 1 (in
# the background) and 0; their output in $t/n0 and $t/n1, their exit statuses in rc0 and rc1
two_nodes() {
  local port=$1 p1
  shift
  timeout 60 "$TCRUN" --nnodes 2 --node-rank 1 --master-port "$port" "$@" >"$t/n1" 2>&1 &
  p1=$!
  timeout 60 "$TCRUN" --nnodes 2 --node-rank 0 --master-port "$port" "$@" >"$t/n0" 2>&1; rc0=$?
  wait $p1; rc1=$?
}
nodes_out() { printf 'rc0=%s rc1=%s\n-- node 0:\n%s\n-- node 1:\n%s\n' "$rc0" "$rc1" "$(cat "$t/n0")" "$(cat "$t/n1")"; }

# 4b. global ranks across nodes; the ranks' store is on a port node 0 picked, not the launchers'
two_nodes 29741 --nproc-per-node 2 tests/distributed/nodes_env.lua
store=$(sed -n 's/.*RANK=0 .*MASTER_PORT=\([0-9]*\).*/\1/p' "$t/n0")
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ -n "$store" ] && [ "$store" != 29741 ] &&
   grep -q "RANK=0 LOCAL_RANK=0 GROUP_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$store$" "$t/n0" &&
   grep -q "RANK=1 LOCAL_RANK=1 GROUP_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$store$" "$t/n0" &&
   grep -q "RANK=2 LOCAL_RANK=0 GROUP_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$store$" "$t/n1" &&
   grep -q "RANK=3 LOCAL_RANK=1 GROUP_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$store$" "$t/n1"; then
  pass "two_node_launch_sets_global_ranks_and_one_store_port"
else fail "two_node_launch_sets_global_ranks_and_one_store_port" "$(nodes_out)"; fi

# 4c. DDP over two nodes (1 and 2 ranks each) equals one process on the average gradient
for g in 1 2; do
  two_nodes $((29741 + g)) --nproc-per-node $g tests/distributed/ddp.lua cpu
  if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ "$(grep -c "of $((2 * g)): ddp ok" "$t/n0")" -eq $g ] &&
     [ "$(grep -c "of $((2 * g)): ddp ok" "$t/n1")" -eq $g ] && grep -q "rank $((2 * g - 1)) of" "$t/n1"; then
    pass "ddp_on_2_nodes_of_${g}_ranks_equals_the_average_gradient_reference"
  else fail "ddp_on_2_nodes_of_${g}_ranks_equals_the_average_gradient_reference" "$(nodes_out)"; fi
done

# 4d. a failing rank on one node stops every node's ranks: the others block opening a FIFO, where
# nothing but the launchers can stop them; every launcher names the rank and exits with its status
mkfifo "$t/fifo"
for f in "3 1 0" "1 0 1"; do
  read -r bad at other <<<"$f"
  two_nodes 29744 --nproc-per-node 2 tests/distributed/fail_on_node.lua "$bad" "$t/fifo"
  if [ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] && grep -q "fail_on_node.lua:[0-9]*: rank $bad gives up" "$t/n$at" &&
     grep -q "rank $bad (node $at, local rank $((bad % 2)), pid [0-9]*) exited with code 1; stopping the other 1 rank on this node and every other node's ranks" "$t/n$at" &&
     grep -q "rank $bad on node $at exited with code 1; stopping the 2 ranks on this node (node $other)" "$t/n$other" &&
     ! grep -q unreachable "$t/n0" "$t/n1"; then
    pass "a_failing_rank_on_node_${at}_stops_every_nodes_ranks"
  else fail "a_failing_rank_on_node_${at}_stops_every_nodes_ranks" "$(nodes_out)"; fi
done

# a launcher killed (SIGKILL, it can tell nobody): node 0 sees its connection drop and stops its
# ranks; the killed launcher's ranks end with it (PR_SET_PDEATHSIG)
running() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
"$TCRUN" --nnodes 2 --node-rank 1 --master-port 29749 --nproc-per-node 2 tests/distributed/fail_on_node.lua 9 "$t/fifo" >"$t/n1" 2>&1 &
p1=$!
timeout 60 "$TCRUN" --nnodes 2 --node-rank 0 --master-port 29749 --nproc-per-node 2 tests/distributed/fail_on_node.lua 9 "$t/fifo" >"$t/n0" 2>&1 &
p0=$!
for _ in $(seq 400); do [ "$(pgrep -c -P $p1)" -ge 2 ] && break; sleep 0.05; done
kids=$(pgrep -P $p1)
{ kill -KILL $p1 && wait $p1; } 2>/dev/null
wait $p0; rc0=$?
for _ in $(seq 400); do
  alive=""
  for k in $kids; do running "$k" && alive="$alive $k"; done
  [ -z "$alive" ] && break
  sleep 0.05
done
if [ $rc0 -eq 1 ] && [ -n "$kids" ] && [ -z "$alive" ] &&
   grep -q "node 1's launcher closed the connection; stopping the 2 ranks on this node (node 0)" "$t/n0"; then
  pass "a_killed_launcher_stops_every_nodes_ranks"
else fail "a_killed_launcher_stops_every_nodes_ranks" "ranks of node 1: $kids; still running:$alive" "$(nodes_out)"; fi

# SIGTERM to node 1's launcher (a scheduler cancelling the job there) stops every node, 128 + 15
"$TCRUN" --nnodes 2 --node-rank 1 --master-port 29750 --nproc-per-node 2 tests/distributed/fail_on_node.lua 9 "$t/fifo" >"$t/n1" 2>&1 &
p1=$!
timeout 60 "$TCRUN" --nnodes 2 --node-rank 0 --master-port 29750 --nproc-per-node 2 tests/distributed/fail_on_node.lua 9 "$t/fifo" >"$t/n0" 2>&1 &
p0=$!
for _ in $(seq 400); do [ "$(pgrep -c -P $p1)" -ge 2 ] && break; sleep 0.05; done
kill -TERM $p1
wait $p1; rc1=$?
wait $p0; rc0=$?
if [ $rc0 -eq 143 ] && [ $rc1 -eq 143 ] && grep -q "tcrun: Terminated: stopping 2 ranks on this node and every other node's ranks" "$t/n1" &&
   grep -q "tcrun: node 1's launcher got Terminated; stopping the 2 ranks on this node (node 0)" "$t/n0"; then
  pass "a_signal_to_one_launcher_stops_every_node"
else fail "a_signal_to_one_launcher_stops_every_node" "$(nodes_out)"; fi

# 4e. a node that never comes: node 0 names it after --rdzv-timeout; a node without node 0 says so
timeout 60 "$TCRUN" --nnodes 3 --node-rank 0 --master-port 29745 --rdzv-timeout 1 --nproc-per-node 1 tests/distributed/nodes_env.lua >"$t/out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "node ranks 1, 2 of 3 did not join within 1 s" "$t/out" && ! grep -q nodes_env "$t/out"; then
  pass "node_0_names_the_nodes_that_never_joined"
else fail "node_0_names_the_nodes_that_never_joined" "rc=$rc" "$(cat "$t/out")"; fi
timeout 60 "$TCRUN" --nnodes 2 --node-rank 1 --master-port 29745 --rdzv-timeout 1 --nproc-per-node 1 tests/distributed/nodes_env.lua >"$t/out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "node 1 could not reach node 0's launcher at 127.0.0.1:29745 within 1 s" "$t/out"; then
  pass "a_node_without_node_0_says_so_after_the_timeout"
else fail "a_node_without_node_0_says_so_after_the_timeout" "rc=$rc" "$(cat "$t/out")"; fi

# 4f. launchers that disagree (--nproc-per-node, a node rank twice) all stop with the same error
timeout 60 "$TCRUN" --nnodes 2 --node-rank 1 --master-port 29746 --nproc-per-node 2 tests/distributed/nodes_env.lua >"$t/n1" 2>&1 &
p1=$!
timeout 60 "$TCRUN" --nnodes 2 --node-rank 0 --master-port 29746 --nproc-per-node 1 tests/distributed/nodes_env.lua >"$t/n0" 2>&1; rc0=$?
wait $p1; rc1=$?
msg="the launcher from 127.0.0.1 (node rank 1) has --nproc-per-node 2, node 0 has 1"
if [ $rc0 -eq 2 ] && [ $rc1 -eq 2 ] && grep -q "rendezvous failed: $msg" "$t/n0" && grep -q "rendezvous failed: $msg" "$t/n1" &&
   ! grep -q nodes_env "$t/n0" "$t/n1"; then
  pass "launchers_with_different_process_counts_stop_with_one_error"
else fail "launchers_with_different_process_counts_stop_with_one_error" "$(nodes_out)"; fi
timeout 60 "$TCRUN" --nnodes 3 --node-rank 1 --master-port 29747 --nproc-per-node 1 tests/distributed/nodes_env.lua >"$t/n1a" 2>&1 &
p1=$!
timeout 60 "$TCRUN" --nnodes 3 --node-rank 1 --master-port 29747 --nproc-per-node 1 tests/distributed/nodes_env.lua >"$t/n1b" 2>&1 &
p2=$!
timeout 60 "$TCRUN" --nnodes 3 --node-rank 0 --master-port 29747 --nproc-per-node 1 tests/distributed/nodes_env.lua >"$t/n0" 2>&1; rc0=$?
wait $p1; rc1=$?
wait $p2; rc2=$?
if [ $rc0 -eq 2 ] && [ $rc1 -eq 2 ] && [ $rc2 -eq 2 ] &&
   [ "$(grep -c "rendezvous failed: two launchers have node rank 1" "$t/n0" "$t/n1a" "$t/n1b" | grep -c ':1$')" -eq 3 ]; then
  pass "two_launchers_with_one_node_rank_stop_with_one_error"
else fail "two_launchers_with_one_node_rank_stop_with_one_error" "rc=$rc0 $rc1 $rc2" "$(cat "$t/n0" "$t/n1a" "$t/n1b")"; fi

# 4g. the settings from the environment (a SLURM-style launcher): PET_/torchrun names before
# SLURM's, an option before any variable
NNODES=2 NODE_RANK=1 SLURM_NODEID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29748 timeout 60 "$TCRUN" --nproc-per-node 1 tests/distributed/nodes_env.lua >"$t/n1" 2>&1 &
p1=$!
NNODES=7 SLURM_NNODES=7 SLURM_NODEID=0 MASTER_ADDR=localhost PET_MASTER_ADDR=127.0.0.1 MASTER_PORT=29748 timeout 60 "$TCRUN" --nnodes 2 --nproc-per-node 1 tests/distributed/nodes_env.lua >"$t/n0" 2>&1; rc0=$?
wait $p1; rc1=$?
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && grep -q "RANK=0 LOCAL_RANK=0 GROUP_RANK=0 WORLD_SIZE=2 .*MASTER_ADDR=127.0.0.1 " "$t/n0" &&
   grep -q "RANK=1 LOCAL_RANK=0 GROUP_RANK=1 WORLD_SIZE=2 .*MASTER_ADDR=127.0.0.1 " "$t/n1" && ! grep -q "MASTER_PORT=29748" "$t/n0"; then
  pass "two_node_launch_from_environment_variables"
else fail "two_node_launch_from_environment_variables" "$(nodes_out)"; fi

# 4h. bad node settings are usage errors
"$TCRUN" --nnodes 2 --node-rank 2 --nproc-per-node 1 tests/distributed/env.lua >/dev/null 2>"$t/err"; rc=$?
NODE_RANK=x "$TCRUN" --nnodes 2 --nproc-per-node 1 tests/distributed/env.lua >/dev/null 2>>"$t/err"; rc2=$?
"$TCRUN" --nnodes 2 --node-rank 1 tests/distributed/env.lua >/dev/null 2>>"$t/err"; rc3=$?
if [ $rc -eq 2 ] && [ $rc2 -eq 2 ] && [ $rc3 -eq 2 ] && grep -q "tcrun: --node-rank 2 is not below --nnodes 2" "$t/err" &&
   grep -q "tcrun: NODE_RANK takes a node rank (0, 1, ...), not 'x'" "$t/err" &&
   grep -q "tcrun: --nnodes needs --nproc-per-node G" "$t/err"; then
  pass "launcher_rejects_bad_node_settings"
else fail "launcher_rejects_bad_node_settings" "rc=$rc $rc2 $rc3" "$(cat "$t/err")"; fi

# 5. every collective on gloo, 1 and 3 ranks
for n in 1 3; do
  if out=$(timeout 120 "$TCRUN" --nproc-per-node $n tests/distributed/collectives.lua cpu 2>&1) &&
     [ "$(grep -c "collectives ok" <<<"$out")" -eq $n ]; then
    pass "gloo_collectives_match_their_definition_on_${n}_ranks"
  else fail "gloo_collectives_match_their_definition_on_${n}_ranks" "$out"; fi
done

# 5b. DistributedDataParallel on gloo: training equals the one-process reference
if out=$(timeout 120 "$TCRUN" --nproc-per-node 2 tests/distributed/ddp.lua cpu 2>&1) &&
   [ "$(grep -c "ddp ok" <<<"$out")" -eq 2 ]; then
  pass "ddp_training_equals_the_average_gradient_reference_on_gloo"
else fail "ddp_training_equals_the_average_gradient_reference_on_gloo" "$out"; fi

# 5c. a small CNN trained with DDP on shards equals one process trained on the whole batch
if out=$(timeout 120 "$TCRUN" --nproc-per-node 2 tests/distributed/ddp_cnn.lua cpu 2>&1) &&
   [ "$(grep -c "ddp cnn ok" <<<"$out")" -eq 2 ]; then
  pass "ddp_cnn_training_equals_full_batch_training_on_gloo"
else fail "ddp_cnn_training_equals_full_batch_training_on_gloo" "$out"; fi

# 5d. compiled DDP (tc.compile of the DDP model, and of a train step) equals eager DDP and
# full-batch training, with its graphs split at bucket boundaries so all-reduces overlap
if out=$(timeout 180 "$TCRUN" --nproc-per-node 2 tests/distributed/ddp_compiled.lua cpu 2>&1) &&
   [ "$(grep -c "ddp compiled ok" <<<"$out")" -eq 2 ]; then
  pass "compiled_ddp_equals_eager_ddp_and_overlaps_on_gloo"
else fail "compiled_ddp_equals_eager_ddp_and_overlaps_on_gloo" "$out"; fi

# 5e. ranks that disagree (issue 32), 2 ranks, short timeouts: every mismatched collective raises
# the same error on every rank and leaves the group in step; DDP over different models fails at
# wrap time on every rank, naming the parameter; uncaught, with the default timeout, it stops
# every rank at once; a rank that exits fails the others' waits (no launcher to stop them); a
# timeout names the rank that never came
if out=$(timeout 120 "$TCRUN" --nproc-per-node 2 tests/distributed/mismatch.lua cpu 2>&1) &&
   [ "$(grep -c "mismatch all ok" <<<"$out")" -eq 2 ]; then
  pass "mismatched_collectives_raise_on_every_rank"
else fail "mismatched_collectives_raise_on_every_rank" "$out"; fi
if out=$(timeout 120 "$TCRUN" --nproc-per-node 2 tests/distributed/ddp_mismatch.lua 2>&1) &&
   [ "$(grep -c "ddp mismatch all ok" <<<"$out")" -eq 2 ]; then
  pass "ddp_over_different_models_fails_on_every_rank_at_wrap_time"
else fail "ddp_over_different_models_fails_on_every_rank_at_wrap_time" "$out"; fi
timeout 60 "$TCRUN" --nproc-per-node 2 tests/distributed/ddp_mismatch.lua uncaught >"$t/out" 2>"$t/err"; rc=$?
if [ $rc -eq 1 ] && grep -q "ddp_mismatch.lua:[0-9]*: DistributedDataParallel: the ranks wrap different models" "$t/err" &&
   ! grep -q "timed out\|unreachable" "$t/err" "$t/out"; then
  pass "ddp_over_different_models_stops_every_rank_at_once"
else fail "ddp_over_different_models_stops_every_rank_at_once" "rc=$rc" "$(cat "$t/err")"; fi
port=$(( 29800 + RANDOM % 100 ))
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=2 timeout 60 "$TCRUN" tests/distributed/rank_leaves.lua >"$t/out0" 2>&1 &
p0=$!
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 WORLD_SIZE=2 timeout 60 "$TCRUN" tests/distributed/rank_leaves.lua >"$t/out1" 2>&1
wait $p0; rc=$?
if [ $rc -eq 0 ] && grep -q "rank_leaves ok" "$t/out0" && grep -q "rank one fails" "$t/out1"; then
  pass "a_rank_that_exits_fails_the_others_waits_at_once"
else fail "a_rank_that_exits_fails_the_others_waits_at_once" "rc=$rc" "$(cat "$t/out0" "$t/out1")"; fi
if out=$(timeout 60 "$TCRUN" --nproc-per-node 2 tests/distributed/timeout_names_ranks.lua 2>&1) &&
   [ "$(grep -c "timeout_names_ranks ok" <<<"$out")" -eq 2 ]; then
  pass "a_collective_timeout_names_the_rank_that_never_came"
else fail "a_collective_timeout_names_the_rank_that_never_came" "$out"; fi

# 6. DistributedSampler
if out=$("$TCRUN" tests/distributed/sampler.lua 2>&1) && grep -q "sampler ok" <<<"$out"; then
  pass "distributed_sampler_partitions_like_torch"
else fail "distributed_sampler_partitions_like_torch" "$out"; fi

# 7. outside the launcher, or for nccl without NCCL/GPU: clear errors
out=$("$TCRUN" -e 'local ok, e = pcall(require("tc.distributed").init_process_group, {backend = "gloo"}); print(e)' 2>&1)
if grep -q "run under \`tcrun --nproc-per-node N\`" <<<"$out"; then
  pass "init_process_group_outside_the_launcher_says_how_to_run"
else fail "init_process_group_outside_the_launcher_says_how_to_run" "$out"; fi
if [ "${2:-}" != cuda ]; then
  out=$(MASTER_ADDR=127.0.0.1 MASTER_PORT=29733 RANK=0 WORLD_SIZE=1 "$TCRUN" -e 'local ok, e = pcall(require("tc.distributed").init_process_group, {backend = "nccl"}); print(e)' 2>&1)
  if grep -Eq "backend \"nccl\" (needs a GPU|needs CUDA)|cannot load NCCL" <<<"$out"; then
    pass "nccl_without_a_gpu_is_a_clear_error"
  else fail "nccl_without_a_gpu_is_a_clear_error" "$out"; fi
else
  # 8. the GPU machine: every collective on nccl, world size 1 (one GPU)
  if out=$(timeout 120 "$TCRUN" --nproc-per-node 1 tests/distributed/collectives.lua cuda 2>&1) &&
     grep -q "collectives ok" <<<"$out"; then
    pass "nccl_collectives_match_their_definition_on_1_rank"
  else fail "nccl_collectives_match_their_definition_on_1_rank" "$out"; fi
  if out=$(timeout 120 "$TCRUN" --nproc-per-node 1 tests/distributed/ddp.lua cuda 2>&1) && grep -q "ddp ok" <<<"$out"; then
    pass "ddp_training_equals_the_reference_on_nccl_1_rank"
  else fail "ddp_training_equals_the_reference_on_nccl_1_rank" "$out"; fi
  if out=$(timeout 180 "$TCRUN" --nproc-per-node 1 tests/distributed/ddp_compiled.lua cuda 2>&1) && grep -q "ddp compiled ok" <<<"$out"; then
    pass "compiled_ddp_equals_eager_ddp_on_nccl_1_rank"
  else fail "compiled_ddp_equals_eager_ddp_on_nccl_1_rank" "$out"; fi
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  if [ "$gpus" -ge 2 ]; then
    if out=$(timeout 180 "$TCRUN" --nproc-per-node "$gpus" tests/distributed/collectives.lua cuda 2>&1) &&
       [ "$(grep -c "collectives ok" <<<"$out")" -eq "$gpus" ]; then
      pass "nccl_collectives_match_their_definition_on_${gpus}_gpus"
    else fail "nccl_collectives_match_their_definition_on_${gpus}_gpus" "$out"; fi
    if out=$(timeout 180 "$TCRUN" --nproc-per-node "$gpus" tests/distributed/ddp.lua cuda 2>&1) &&
       [ "$(grep -c "ddp ok" <<<"$out")" -eq "$gpus" ]; then
      pass "ddp_training_equals_the_reference_on_${gpus}_gpus"
    else fail "ddp_training_equals_the_reference_on_${gpus}_gpus" "$out"; fi
    if out=$(timeout 180 "$TCRUN" --nproc-per-node "$gpus" tests/distributed/ddp_cnn.lua cuda 2>&1) &&
       [ "$(grep -c "ddp cnn ok" <<<"$out")" -eq "$gpus" ]; then
      pass "ddp_cnn_training_equals_full_batch_training_on_${gpus}_gpus"
    else fail "ddp_cnn_training_equals_full_batch_training_on_${gpus}_gpus" "$out"; fi
    # mismatched calls fail on every rank before NCCL runs (2 GPUs)
    if out=$(timeout 120 "$TCRUN" --nproc-per-node 2 tests/distributed/mismatch.lua cuda 2>&1) &&
       [ "$(grep -c "mismatch all ok" <<<"$out")" -eq 2 ]; then
      pass "mismatched_collectives_raise_on_every_rank_on_nccl"
    else fail "mismatched_collectives_raise_on_every_rank_on_nccl" "$out"; fi
    if out=$(timeout 240 "$TCRUN" --nproc-per-node "$gpus" tests/distributed/ddp_compiled.lua cuda 2>&1) &&
       [ "$(grep -c "ddp compiled ok" <<<"$out")" -eq "$gpus" ]; then
      pass "compiled_ddp_equals_eager_ddp_and_overlaps_on_${gpus}_gpus"
    else fail "compiled_ddp_equals_eager_ddp_and_overlaps_on_${gpus}_gpus" "$out"; fi
  fi
fi

[ $fails -eq 0 ] && echo "distributed: all passed" || echo "distributed: $fails failed"
exit $(( fails > 0 ))
