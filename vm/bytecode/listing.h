// The disassembler: a Proto tree printed the way `luac5.4 -l -l` prints it.
#pragma once

#include <string>

#include "proto.h"

namespace tc::vm {

// Every function of the tree, depth first, each with its header, code and (when `full`) its
// constants/locals/upvalues sections. Addresses are those of the Proto objects.
std::string listing(const Proto& f, bool full = true);

// One instruction as luac prints it after "\t<pc>\t[<line>]\t": "GETTABUP \t0 0 0\t; _ENV \"x\"".
std::string format_instruction(const Proto& f, int pc);

// A constant as luac prints it: 3.0, 42, "a\n", nil, true.
std::string format_constant(const Constant& c);

}  // namespace tc::vm
