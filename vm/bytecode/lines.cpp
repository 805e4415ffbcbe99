// Line information: decoding lineinfo/abslineinfo to absolute lines and re-encoding them.
#include <cstdlib>

#include "proto.h"

namespace tc::vm {
namespace {

// The runtime's lookup (getbaseline + deltas), bounds-checked so malformed data stays safe.
int line_at(const Proto& f, int pc) {
  const auto& abs = f.abslineinfo;
  int basepc = -1, line = f.linedefined;
  if (!abs.empty() && pc >= abs[0].pc) {
    int i = pc / kMaxInstrWithoutAbs - 1;  // the runtime's estimate, a lower bound when valid
    if (i < 0 || i >= int(abs.size()) || abs[i].pc > pc) i = 0;
    while (i + 1 < int(abs.size()) && pc >= abs[i + 1].pc) i++;
    basepc = abs[i].pc;
    line = abs[i].line;
  }
  while (basepc++ < pc && basepc < int(f.lineinfo.size())) line += f.lineinfo[basepc];
  return line;
}

}  // namespace

std::vector<int> decode_lines(const Proto& f) {
  std::vector<int> lines(f.code.size(), -1);
  if (f.lineinfo.empty()) return lines;
  for (int pc = 0; pc < int(f.code.size()); pc++) lines[pc] = line_at(f, pc);
  return lines;
}

void encode_lines(Proto& f, const std::vector<int>& lines) {
  f.lineinfo.clear();
  f.abslineinfo.clear();
  int previous = f.linedefined, without_abs = 0;
  for (int pc = 0; pc < int(lines.size()); pc++) {
    int delta = lines[pc] - previous;
    if (std::abs(delta) >= 128 || without_abs++ >= kMaxInstrWithoutAbs) {
      f.abslineinfo.push_back({pc, lines[pc]});
      delta = kAbsLineInfo;
      without_abs = 1;
    }
    f.lineinfo.push_back(int8_t(delta));
    previous = lines[pc];
  }
}

std::string describe(const Proto& f) {
  std::string src = f.source ? *f.source : "=?";
  if (!src.empty() && (src[0] == '@' || src[0] == '=')) src = src.substr(1);
  if (f.linedefined == 0) return "main chunk <" + src + ">";
  return "function <" + src + ":" + std::to_string(f.linedefined) + ">";
}

std::string local_name(const Proto& f, int reg, int pc) {
  int active = 0;
  for (const LocVar& v : f.locvars) {
    if (v.startpc > pc) break;
    if (pc < v.endpc) {
      if (active == reg) return v.name ? *v.name : "";
      active++;
    }
  }
  return "";
}

}  // namespace tc::vm
