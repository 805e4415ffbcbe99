// Control flow and register dataflow of one proto: liveness, to-be-closed and captured registers,
// and the legal resume points.
#pragma once

#include <string>
#include <vector>

#include "effects.h"
#include "proto.h"

namespace tc::vm {

struct Analysis {
  std::vector<std::vector<int>> succ, pred;  // in-range edges only
  std::vector<bool> reachable;               // from pc 0
  std::vector<RegSet> live;        // registers whose value may be read before pc's write-back
  std::vector<RegSet> tbc;         // registers registered to-be-closed when pc is about to run
  std::vector<RegSet> captured;    // registers that may have an open upvalue when pc is about to run
};

Analysis analyze(const Proto& f);

// A legal place to resume: never an MMBIN*, an EXTRAARG, the JMP after a test or VARARGPREP.
// At a consumer of open results (CALL/TAILCALL/RETURN/SETLIST with B=0) the open values from
// `open_base` up to `top` must be handed over too, and the resume function rebuilds `top`.
struct ResumePoint {
  int pc = 0;
  bool open_results = false;
  int open_base = 0;
};
std::vector<ResumePoint> resume_points(const Proto& f);
// The resume point at pc, or nullopt-like {pc=-1} when pc is not legal.
ResumePoint resume_point_at(const Proto& f, int pc);

// Why the captured locals at pc make resuming unsafe ("" when they do not): a local shared with a
// closure (open upvalue) that is written after pc, or read after pc while a closure may write it.
std::string capture_conflict(const Proto& f, const Analysis& a, int pc);

}  // namespace tc::vm
