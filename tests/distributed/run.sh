#!/usr/bin/env bash
# tc.distributed and `tcrun --nproc-per-node` (issue 15), without a GPU: the launcher's
# environment, exit statuses and failure handling, the TCP store and every collective on the
# gloo (CPU) backend, and the clear error for nccl where NCCL or a GPU is missing.
# Usage: tests/distributed/run.sh path/to/tcrun [cuda]   (cuda: the collectives on nccl too)
set -uo pipefail
cd "$(dirname "$0")/../.."
TCRUN=${1:?usage: run.sh path/to/tcrun [cuda]}
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
