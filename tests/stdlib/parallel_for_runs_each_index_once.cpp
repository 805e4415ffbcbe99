// parallel_for (stdlib/cpu/parallel.cpp): every index of the range runs exactly once, for any
// thread count, range and grain, over many back-to-back calls (workers that wake late must find
// nothing left of an earlier call, and never run a finished call's body), and nested calls run
// inline.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "tc/parallel.h"

namespace tc {
namespace {

TEST(ParallelFor, EachIndexRunsOnce) {
  const int before = get_num_threads();
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1001}) {
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(n + 10);
        parallel_for(5, 5 + n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LE(b, e);
          for (int64_t i = b; i < e; i++) hits[i]++;
        });
        for (int64_t i = 0; i < n + 10; i++)
          ASSERT_EQ(hits[i].load(), i >= 5 && i < 5 + n ? 1 : 0) << threads << " threads, n " << n << ", grain " << grain;
      }
    }
  }
  set_num_threads(before);
}

TEST(ParallelFor, BackToBackCallsDoNotMix) {
  const int before = get_num_threads();
  set_num_threads(2);
  for (int call = 0; call < 2000; call++) {
    std::atomic<int64_t> sum{0};
    parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) sum += i + call;
    });
    ASSERT_EQ(sum.load(), 28 + 8 * call) << "call " << call;
  }
  set_num_threads(before);
}

TEST(ParallelFor, NestedCallsRunInline) {
  const int before = get_num_threads();
  set_num_threads(2);
  std::atomic<int64_t> inner{0};
  parallel_for(0, 4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++)
      parallel_for(0, 100, 1, [&](int64_t ib, int64_t ie) { inner += ie - ib; });
  });
  EXPECT_EQ(inner.load(), 400);
  set_num_threads(before);
}

}  // namespace
}  // namespace tc
