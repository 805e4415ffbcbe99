// print_bytecode: load a Lua file, dump it, read it back and print it like `luac5.4 -l -l`.
#include <iostream>

#include "dump.h"
#include "listing.h"
#include "tc/vm/bytecode.h"

namespace tc::vm {

int print_bytecode(const char* path, std::ostream& out) {
  try {
    Proto main = read_chunk(load_and_dump_file(path));
    out << listing(main);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tcrun: --bytecode " << path << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace tc::vm
