// Split-check prefix functions: the original code that, on reaching a pc, hands its live
// registers to the resume function (see split_check.cpp for the protocol).
#pragma once

#include <string>
#include <vector>

#include "proto.h"
#include "resume.h"

namespace tc::vm {

// Upvalues appended to every proto from the root down to the target, in this order.
enum SplitUpvalue { kSplitFinish, kSplitHandoff, kSplitPack, kSplitSave, kSplitNoop, kSplitUpvalues };

struct SplitRoot {
  Proto root;            // the root with the target proto replaced by its prefix
  std::string refusal;   // non-empty: this pc cannot be exercised by the harness, and why
};

// `path` leads from root to the target proto (nested-proto indices; empty for the root itself).
SplitRoot build_split_root(const Proto& root, const std::vector<int>& path, const ResumePlan& plan,
                           const Proto& resume);

}  // namespace tc::vm
