// The Proto tree: an exact in-memory model of one Lua 5.4 function prototype and its children.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tc::vm {

// Malformed or unsupported binary chunk (reader), or a proto the writer cannot encode.
class BytecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Constant tags as they appear in a dump: type | variant << 4.
enum class ConstTag : uint8_t {
  Nil = 0x00, False = 0x01, True = 0x11, Int = 0x03, Float = 0x13, ShortStr = 0x04, LongStr = 0x14
};

struct Constant {
  ConstTag tag = ConstTag::Nil;
  int64_t i = 0;   // Int
  double f = 0;    // Float
  std::string s;   // ShortStr / LongStr
  bool is_string() const { return tag == ConstTag::ShortStr || tag == ConstTag::LongStr; }
  bool is_number() const { return tag == ConstTag::Int || tag == ConstTag::Float; }
};

struct UpvalDesc {
  bool instack = false;  // captures a register of the enclosing function (else its upvalue)
  uint8_t idx = 0;       // register or enclosing upvalue index
  uint8_t kind = 0;      // 0 regular, 1 <const>, 2 <close>, 3 compile-time constant
};

struct LocVar {
  std::optional<std::string> name;
  int startpc = 0, endpc = 0;  // active on [startpc, endpc)
};

struct AbsLineInfo {
  int pc = 0, line = 0;
};

inline constexpr int kAbsLineInfo = -128;  // lineinfo byte that means "see abslineinfo"
inline constexpr int kMaxInstrWithoutAbs = 128;

struct Proto {
  std::optional<std::string> source;  // resolved: a nested proto inherits its parent's
  int linedefined = 0, lastlinedefined = 0;
  uint8_t numparams = 0, is_vararg = 0, maxstacksize = 2;
  std::vector<uint32_t> code;
  std::vector<Constant> k;
  std::vector<UpvalDesc> upvalues;
  std::vector<Proto> protos;
  // Debug information, exactly as dumped (empty when stripped).
  std::vector<int8_t> lineinfo;
  std::vector<AbsLineInfo> abslineinfo;
  std::vector<LocVar> locvars;
  std::vector<std::optional<std::string>> upvalue_names;  // empty or one per upvalue

  bool has_lines() const { return !lineinfo.empty(); }
};

// The binary chunk <-> Proto tree. The header's upvalue count must equal the main function's.
Proto read_chunk(std::string_view bytes);
std::string write_chunk(const Proto& main);

// Absolute line of each instruction, decoded as the Lua 5.4 runtime does (-1 without debug info).
std::vector<int> decode_lines(const Proto& f);
// Rebuilds lineinfo/abslineinfo from absolute lines with the compiler's policy (an absolute
// entry when |delta| >= 128 and after at most 128 instructions without one).
void encode_lines(Proto& f, const std::vector<int>& lines);

// "name" of the function for messages: "function <file.lua:12>" or "main chunk <file.lua>".
std::string describe(const Proto& f);
// Name of the local variable in register `reg` at `pc`, or "" when unknown.
std::string local_name(const Proto& f, int reg, int pc);

}  // namespace tc::vm
