// Per-instruction control flow (successors) and register effects (reads, writes) of Lua 5.4 code.
#pragma once

#include <bitset>

#include "opcodes.h"
#include "proto.h"

namespace tc::vm {

using RegSet = std::bitset<256>;

inline constexpr int kOpenCount = -1;  // a range that extends to `top` (open results)

struct RegRange {
  int first = 0;
  int count = 0;  // kOpenCount: first .. end of frame
};

struct Effects {
  RegRange reads[4];
  int nreads = 0;
  RegRange writes[2];
  int nwrites = 0;
  bool may_write = false;  // the writes happen on one path only (TESTSET, TFORLOOP): not a kill
  RegSet captures;         // registers a CLOSURE captures (read, and shared with the closure)

  void read(int first, int count = 1) { reads[nreads++] = {first, count}; }
  void write(int first, int count = 1) { writes[nwrites++] = {first, count}; }
};

// What the instruction at pc reads and writes. Needs pc-1 for MMBIN* (they write the A of the
// arithmetic instruction before them) and the nested protos for CLOSURE (captured registers).
Effects effects(const Proto& f, int pc);

// Where control may go after pc: up to two pcs, possibly out of range for malformed code.
struct Successors {
  int pc[2];
  int n = 0;
  void add(int p) { pc[n++] = p; }
};
Successors successors(const Proto& f, int pc);

// True for the FORPREP of `LOADI a 1; LOADI a+1 0; LOADI a+2 1; FORPREP a` (a loop from 1 to 0):
// it always jumps to its exit. Resume prologues use it as a jump that keeps Lua's variable names.
bool is_empty_loop_jump(const Proto& f, int pc);

// Registers of a range as a set, open ranges ending at `frame_size`.
RegSet to_set(const RegRange& r, int frame_size);

}  // namespace tc::vm
