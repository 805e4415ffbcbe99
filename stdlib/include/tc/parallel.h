// A small persistent thread pool for CPU kernels: parallel_for over an index range.
//
//   tc::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) { ... });
//
// Runs inline when the range is below `grain` or only one thread is configured. Nested calls
// run inline. Kernels must not throw from inside the body.
#pragma once
#include <cstdint>
#include <functional>

namespace tc {

int get_num_threads();
void set_num_threads(int n);  // also sets OpenBLAS's thread count
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body);

}  // namespace tc
