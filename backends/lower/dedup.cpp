// Structural kernel dedup: kernels equal but for their name and sources are kept once, and every
// launch points at the survivor (kernels see buffers and sizes only through parameters, so the
// 64 identical layers of a model share one layer's kernels).
#include <unordered_map>

#include "lower_internal.h"

namespace tc::lower {

void dedup(LoweredGraph& lg) {
  std::vector<Kernel> kept;
  std::unordered_multimap<uint64_t, int> by_hash;
  std::vector<int> remap(lg.kernels.size());
  for (size_t i = 0; i < lg.kernels.size(); i++) {
    Kernel& k = lg.kernels[i];
    uint64_t h = k.structural_hash();
    int found = -1;
    auto [b, e] = by_hash.equal_range(h);
    for (auto it = b; it != e && found < 0; ++it)
      if (kept[it->second].same_structure(k)) found = it->second;
    if (found < 0) {
      found = int(kept.size());
      by_hash.emplace(h, found);
      kept.push_back(std::move(k));
    } else {
      Kernel& s = kept[found];
      s.source_nodes.insert(s.source_nodes.end(), k.source_nodes.begin(), k.source_nodes.end());
    }
    remap[i] = found;
  }
  for (Step& s : lg.steps)
    if (s.kind == Step::Kind::Launch) s.launch.kernel = remap[s.launch.kernel];
  lg.kernels = std::move(kept);
}

}  // namespace tc::lower
