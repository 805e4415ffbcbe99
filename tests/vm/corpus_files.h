// Test helper: the Lua files of tests/vm/corpus, plus a generated file that needs LOADKX.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace tc::vm::testing {

inline std::vector<std::string> lua_files(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 4 && name.substr(name.size() - 4) == ".lua") files.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A path under the test temp folder that no other process uses: several test binaries (and other
// checkouts' runs) write their generated files at once.
inline std::string private_temp_path(const std::string& name) {
  return ::testing::TempDir() + "tc_" + std::to_string(getpid()) + "_" + name;
}

// A chunk with more than 2^17 constants, so that its last ones are loaded with LOADKX.
inline std::string write_loadkx_file() {
  std::string path = private_temp_path("loadkx.lua");
  std::ofstream out(path);
  out << "-- generated: 131200 string constants\nreturn {";
  for (int i = 0; i < 131200; i++) out << "\"s" << i << "\",";
  out << "}\n";
  return path;
}

inline std::vector<std::string> corpus() {
  std::vector<std::string> files = lua_files(std::string(TC_SOURCE_DIR) + "/tests/vm/corpus");
  files.push_back(write_loadkx_file());
  return files;
}

}  // namespace tc::vm::testing
