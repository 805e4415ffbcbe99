// dlopen of the first loadable library among candidates (the CUDA libraries are loaded on first
// use, so one binary runs where they are missing).
#pragma once
#include <dlfcn.h>

#include <string>
#include <vector>

namespace tc::cuda {

// The handle of the first candidate that loads, or null with the first dlerror in *errs.
inline void* open_first(const std::vector<std::string>& candidates, std::string* errs) {
  for (const std::string& c : candidates) {
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    if (errs->empty() && e) *errs = e;
  }
  return nullptr;
}

}  // namespace tc::cuda
