// Graph-break reasons (from breaks.def) and the break record the tracer produces.
#pragma once
#include <string>
#include <vector>

namespace tc::capture {

enum class BreakCode : uint8_t {
#define TC_BREAK(name, code, message, hint) name,
#include "breaks.def"
#undef TC_BREAK
};

struct BreakInfo {
  const char* code;
  const char* message;
  const char* hint;
};
const BreakInfo& break_info(BreakCode c);

// One frame of the user stack at a break: "bar.lua:3 in function 'bar'" and its source line.
struct StackFrame {
  std::string file;
  int line = -1;
  std::string function;
  std::string source_line;
};

struct GraphBreak {
  GraphBreak() = default;
  GraphBreak(BreakCode c, std::string d, std::vector<StackFrame> s)
      : code(c), detail(std::move(d)), stack(std::move(s)) {}
  BreakCode code = BreakCode::UnsupportedBytecode;
  std::string detail;             // what exactly: "`<` on a tensor value", "print"
  std::vector<StackFrame> stack;  // innermost last
  std::string action;             // what tc did about it (explain)
  std::string reason() const;     // "data-dependent branch: ... (`<` on a tensor value) (TC0101)"
  std::string where() const;      // "file.lua:3"
};

}  // namespace tc::capture
