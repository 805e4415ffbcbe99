// Break reasons: the table from breaks.def and the break's printed forms.
#include "breaks.h"

namespace tc::capture {

const BreakInfo& break_info(BreakCode c) {
  static const BreakInfo table[] = {
#define TC_BREAK(name, code, message, hint) {code, message, hint},
#include "breaks.def"
#undef TC_BREAK
  };
  return table[int(c)];
}

std::string GraphBreak::reason() const {
  const BreakInfo& b = break_info(code);
  std::string r = b.message;
  if (!detail.empty()) r += ": " + detail;
  return r + " (" + b.code + ")";
}

std::string GraphBreak::where() const {
  if (stack.empty()) return "?";
  return stack.back().file + ":" + std::to_string(stack.back().line);
}

}  // namespace tc::capture
