// tc.compile(f, {mode = "reduce-overhead"}) on the GPU (skipped without one): after one warm-up
// call each input size is recorded once and replayed; replays equal plain f for several inputs,
// after inputs are mutated in place, for inputs at new addresses, for graphs that write their
// inputs, and outputs of earlier calls are not overwritten; each size selects its own graph, up
// to tc.config.cudagraph_max_sizes (then plain launches, one warning); a graph that reads device
// values on the host is not recorded and runs plain launches with one warning; an index out of
// range raises the op's error as eager does.
#include <gtest/gtest.h>

#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/cuda.h"
#include "tc/cuda_graph.h"
#include "tc/vm/runtime.h"

using namespace tc;

namespace {

class ReduceOverhead : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
    capture::install(rt.state(), backends::graph_compiler());
    rt.run_string(R"(
      tc = require "tc"
      tc.compiler.reset()
      function check(got, want, what)
        local d = (got:cpu() - want:cpu()):abs():max():item()
        if d > 1e-4 then error(what .. ": differs by " .. d) end
      end
    )");
  }
  vm::Runtime rt{"test"};
};

int64_t captures() { return cuda::cuda_graph_stats().captures; }
int64_t replays() { return cuda::cuda_graph_stats().replays; }

}  // namespace

TEST_F(ReduceOverhead, ReplaysEqualPlainCallsForEveryBackend) {
  for (const char* backend : {"tc", "eager", "inductor", "cuda"}) {
    const int64_t c0 = captures(), r0 = replays();
    rt.run_string(std::string("backend = '") + backend + "'\n" + R"(
      local function f(x, w, b) return (x:matmul(w) + b):relu():softmax(-1) + x:sin() end
      local cf = tc.compile(f, {backend = backend, mode = "reduce-overhead"})
      local x, w, b = tc.randn(32, 32):cuda(), tc.randn(32, 32):cuda(), tc.randn(32):cuda()
      local outs, wants = {}, {}
      for i = 1, 6 do
        if i % 2 == 0 then x:copy_(tc.randn(32, 32):cuda()) else x = tc.randn(32, 32):cuda() end
        outs[i], wants[i] = cf(x, w, b), f(x, w, b)
        check(outs[i], wants[i], backend .. " call " .. i)
      end
      -- outputs of earlier calls were not overwritten by later replays
      for i = 1, 6 do check(outs[i], wants[i], backend .. " output " .. i .. " kept") end
    )");
    EXPECT_GE(captures() - c0, 1) << backend;
    // x alternates between a new address and the last call's: recorded after the warm-up, again
    // when x first moved (copied into a static buffer from then on), again when x came back at
    // the last call's address (read in place: promote_still_inputs, once per graph), and again
    // when it moved after that (copied for good)
    EXPECT_LE(captures() - c0, 4) << backend;
    EXPECT_GE(replays() - r0, 4) << backend;
  }
}

TEST_F(ReduceOverhead, GraphsThatWriteTheirInputsWriteTheCallersTensors) {
  rt.run_string(R"(
    local function f(x, acc) acc:add_(x); return acc * 2 end
    local cf = tc.compile(f, {mode = "reduce-overhead"})
    local a, b = tc.zeros(8):cuda(), tc.zeros(8):cuda()
    for i = 1, 5 do
      local x = tc.randn(8):cuda()          -- a new address each call: copied in
      check(cf(x, a), f(x, b), "call " .. i)
      check(a, b, "accumulator after call " .. i)
    end
  )");
}

TEST_F(ReduceOverhead, EachSizeHasItsOwnGraphUpToTheLimit) {
  testing::internal::CaptureStderr();
  const int64_t c0 = captures();
  rt.run_string(R"(
    tc.config.cudagraph_max_sizes = 2
    local function f(x) return (x * 3):exp():sum(1) end
    local cf = tc.compile(f, {mode = "reduce-overhead", dynamic = true})
    for round = 1, 3 do
      for _, n in ipairs({5, 9, 17}) do
        local x = tc.randn(n, 4):cuda()
        check(cf(x), f(x), "size " .. n .. " round " .. round)
      end
    end
    tc.config.cudagraph_max_sizes = 8
  )");
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(captures() - c0, 2);  // sizes 5 and 9; 17 is past the limit
  EXPECT_NE(log.find("cudagraph_max_sizes"), std::string::npos) << log;
  EXPECT_EQ(log.find("cudagraph_max_sizes"), log.rfind("cudagraph_max_sizes")) << log;  // warned once
}

TEST_F(ReduceOverhead, AHostReadAbandonsRecordingWithOneWarningAndResultsStayRight) {
  testing::internal::CaptureStderr();
  const int64_t abandoned = cuda::cuda_graph_stats().abandoned;
  rt.run_string(R"(
    -- eager's pow by a 0-dim GPU tensor reads the exponent on the host (to pick x * x, sqrt ...):
    -- the recording cannot hold that read. (The generated kernels of "tc" read it on the device.)
    local function f(x, e) return tc.pow(x, e) + x end
    local cf = tc.compile(f, {backend = "eager", mode = "reduce-overhead"})
    for i = 1, 5 do
      local x, e = tc.rand(6):cuda(), tc.tensor(i % 3 + 0.5):cuda()
      check(cf(x, e), f(x, e), "call " .. i)
    end
  )");
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(cuda::cuda_graph_stats().abandoned, abandoned + 1);
  EXPECT_NE(log.find("cannot be recorded as a CUDA graph"), std::string::npos) << log;
  EXPECT_EQ(log.find("cannot be recorded"), log.rfind("cannot be recorded")) << log;
}

TEST_F(ReduceOverhead, AnIndexOutOfRangeRaisesTheOpsError) {
  // embedding and cross_entropy's targets, generated with device-side checks ("tc": read after
  // the replay without waiting, raised by the next synchronize() at the latest, naming the op's
  // line) or eager's kernels ("eager": a replay that flags a bad index reruns plainly, which
  // raises eager's error at once)
  for (const char* backend : {"tc", "eager"}) {
    rt.run_string(std::string("backend = '") + backend + "'\n" + R"(
      local F = tc.nn.functional
      local function f(w, ids, x, t) return F.embedding(ids, w) * 2, F.cross_entropy(x, t) end
      local cf = tc.compile(f, {backend = backend, mode = "reduce-overhead"})
      local w, x = tc.randn(10, 4):cuda(), tc.randn(3, 5):cuda()
      local ids, t = tc.tensor({1, 2, 3}):cuda(), tc.tensor({1, 5, 2}):cuda()
      for i = 1, 3 do
        local a, b = cf(w, ids, x, t)
        local c, d = f(w, ids, x, t)
        check(a, c, backend .. " call " .. i)
        check(b, d, backend .. " loss " .. i)
      end
      local function call_and_sync() cf(w, ids, x, t); tc.cuda.synchronize() end
      local function raises_as_eager()
        local ok, err = pcall(call_and_sync)
        local ok2, err2 = pcall(f, w, ids, x, t)
        assert(not ok and not ok2, backend .. ": both fail")
        -- eager's message, inside the compiled one (which adds the op's line when it surfaced later)
        assert(err.kind == "IndexError" and err.message:find(err2.message, 1, true),
               backend .. ": " .. tostring(err.kind) .. " " .. tostring(err.message) .. " lacks " .. tostring(err2.message))
        assert(err.line == err2.line or err.message:find(":" .. err2.line .. ",", 1, true), backend .. ": " .. tostring(err))
      end
      ids:copy_(tc.tensor({1, 2, 30}))
      raises_as_eager()
      ids:copy_(tc.tensor({1, 2, 3}))
      t:copy_(tc.tensor({1, 6, 2}))
      raises_as_eager()
      t:copy_(tc.tensor({1, 5, 2}))
      local a, b = cf(w, ids, x, t)
      local c, d = f(w, ids, x, t)
      check(a, c, backend .. " after the errors")
      check(b, d, backend .. " loss after the errors")
    )");
  }
}
