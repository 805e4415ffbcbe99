// Resume-function synthesis: a proto that continues a function at a pc from its live registers.
#pragma once

#include <string>
#include <vector>

#include "analysis.h"
#include "proto.h"

namespace tc::vm {

// What a resume function at `pc` takes, in order: the `registers` (ascending), then, when
// `varargs`, the original call's varargs, or when `open_results`, the open values from
// `open_base` up to `top` (never both). `tbc` registers are re-registered to-be-closed.
struct ResumePlan {
  int pc = -1;
  std::vector<int> registers;
  bool varargs = false;
  bool open_results = false;
  int open_base = 0;
  std::vector<int> tbc;
  std::string refusal;  // non-empty: resuming here is unsafe, and this says why
  bool ok() const { return refusal.empty(); }
};

ResumePlan plan_resume(const Proto& f, const Analysis& a, int pc);
ResumePlan plan_resume(const Proto& f, int pc);

// The resume proto: a prologue (VARARGPREP when it takes varargs or open values; MOVEs of the
// parameters to their registers; TBC; VARARG + a copy of the open-results consumer chain) and a
// JMP into a verbatim copy of f's code, with RETURN/TAILCALL C fields fixed for the new arity.
// Constants, upvalues, nested protos and line info are f's, so errors still say file.lua:LINE.
// Throws BytecodeError when plan is refused or does not fit f.
Proto synthesize_resume(const Proto& f, const ResumePlan& plan);

}  // namespace tc::vm
