// Reads a lua_dump binary chunk into a Proto tree, bounds-checking every byte it touches.
#include <climits>
#include <cstring>

#include "chunk_format.h"
#include "opcodes.h"
#include "proto.h"

namespace tc::vm {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view bytes) : data_(bytes) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw BytecodeError("bad binary chunk: " + what + " (at byte " + std::to_string(pos_) + " of " +
                        std::to_string(data_.size()) + ")");
  }
  size_t remaining() const { return data_.size() - pos_; }
  bool at_end() const { return pos_ == data_.size(); }

  void need(size_t n, const char* what) const {
    if (n > remaining()) fail(std::string("truncated chunk while reading ") + what);
  }
  uint8_t byte(const char* what) {
    need(1, what);
    return uint8_t(data_[pos_++]);
  }
  void raw(void* out, size_t n, const char* what) {
    need(n, what);
    if (n == 0) return;
    std::memcpy(out, data_.data() + pos_, n);
    pos_ += n;
  }
  // Big-endian base-128 varint; the last byte has bit 7 set.
  uint64_t unsigned_(uint64_t limit, const char* what) {
    uint64_t x = 0;
    limit >>= 7;
    for (;;) {
      uint8_t b = byte(what);
      if (x >= limit) fail(std::string("integer overflow while reading ") + what);
      x = (x << 7) | (b & 0x7F);
      if (b & 0x80) return x;
    }
  }
  int int_(const char* what) { return int(unsigned_(INT_MAX, what)); }
  // A count of items each at least `min_bytes` long: rejected early if it cannot fit.
  int count(size_t min_bytes, const char* what) {
    int n = int_(what);
    if (size_t(n) > remaining() / min_bytes) fail(std::string("truncated chunk: too many ") + what);
    return n;
  }
  std::optional<std::string> string(const char* what) {
    uint64_t size = unsigned_(UINT64_MAX, what);
    if (size == 0) return std::nullopt;
    need(size - 1, what);
    std::string s(data_.data() + pos_, size - 1);
    pos_ += size - 1;
    return s;
  }

  void header();
  void function(Proto& f, const std::optional<std::string>& parent_source, int depth);

 private:
  void literal(const char* bytes, size_t n, const char* error) {
    need(n, error);
    if (std::memcmp(data_.data() + pos_, bytes, n) != 0) fail(error);
    pos_ += n;
  }
  void constants(Proto& f);
  void debug(Proto& f);

  std::string_view data_;
  size_t pos_ = 0;
};

void Reader::header() {
  literal(chunk::kSignature, 4, "not a binary chunk (bad signature)");
  if (byte("version") != chunk::kVersion) fail("version mismatch (only Lua 5.4 chunks are read)");
  if (byte("format") != chunk::kFormat) fail("format mismatch");
  literal(chunk::kData, 6, "corrupted chunk (LUAC_DATA)");
  if (byte("sizes") != chunk::kInstructionSize) fail("Instruction size mismatch");
  if (byte("sizes") != chunk::kIntegerSize) fail("lua_Integer size mismatch");
  if (byte("sizes") != chunk::kNumberSize) fail("lua_Number size mismatch");
  int64_t i;
  raw(&i, 8, "header integer");
  if (i != chunk::kCheckInt) fail("integer format mismatch");
  double n;
  raw(&n, 8, "header float");
  if (n != chunk::kCheckNum) fail("float format mismatch");
}

void Reader::constants(Proto& f) {
  int n = count(1, "constants");
  f.k.resize(n);
  for (Constant& c : f.k) {
    uint8_t tag = byte("constant tag");
    c.tag = ConstTag(tag);
    switch (c.tag) {
      case ConstTag::Nil:
      case ConstTag::False:
      case ConstTag::True:
        break;
      case ConstTag::Int:
        raw(&c.i, 8, "integer constant");
        break;
      case ConstTag::Float:
        raw(&c.f, 8, "float constant");
        break;
      case ConstTag::ShortStr:
      case ConstTag::LongStr: {
        auto s = string("string constant");
        if (!s) fail("string constant is NULL");
        c.s = std::move(*s);
        break;
      }
      default:
        fail("unknown constant tag " + std::to_string(tag));
    }
  }
}

void Reader::debug(Proto& f) {
  int n = count(1, "lineinfo entries");
  if (n != 0 && size_t(n) != f.code.size()) fail("lineinfo size differs from code size");
  f.lineinfo.resize(n);
  raw(f.lineinfo.data(), n, "lineinfo");
  n = count(2, "abslineinfo entries");
  f.abslineinfo.resize(n);
  for (AbsLineInfo& a : f.abslineinfo) {
    a.pc = int_("abslineinfo pc");
    a.line = int_("abslineinfo line");
  }
  n = count(3, "local variables");
  f.locvars.resize(n);
  for (LocVar& v : f.locvars) {
    v.name = string("local name");
    v.startpc = int_("local startpc");
    v.endpc = int_("local endpc");
  }
  n = count(1, "upvalue names");
  if (n != 0 && size_t(n) != f.upvalues.size()) fail("upvalue name count differs from upvalues");
  f.upvalue_names.resize(n);
  for (auto& name : f.upvalue_names) name = string("upvalue name");
}

void Reader::function(Proto& f, const std::optional<std::string>& parent_source, int depth) {
  if (depth > chunk::kMaxNesting) fail("functions nested too deeply");
  f.source = string("source");
  if (!f.source) f.source = parent_source;
  f.linedefined = int_("linedefined");
  f.lastlinedefined = int_("lastlinedefined");
  f.numparams = byte("numparams");
  f.is_vararg = byte("is_vararg");
  f.maxstacksize = byte("maxstacksize");
  int n = count(4, "instructions");
  f.code.resize(n);
  raw(f.code.data(), size_t(n) * 4, "code");
  for (int pc = 0; pc < n; pc++)
    if (!valid_opcode(f.code[pc])) fail("invalid opcode at pc " + std::to_string(pc + 1));
  constants(f);
  n = count(3, "upvalues");
  f.upvalues.resize(n);
  for (UpvalDesc& u : f.upvalues) {
    uint8_t instack = byte("upvalue instack");
    if (instack > 1) fail("upvalue instack flag is neither 0 nor 1");
    u.instack = instack;
    u.idx = byte("upvalue idx");
    u.kind = byte("upvalue kind");
  }
  n = count(1, "nested functions");
  f.protos.resize(n);
  for (Proto& child : f.protos) function(child, f.source, depth + 1);
  debug(f);
}

}  // namespace

Proto read_chunk(std::string_view bytes) {
  Reader r(bytes);
  r.header();
  int nup = r.byte("main upvalue count");
  Proto main;
  r.function(main, std::nullopt, 0);
  if (size_t(nup) != main.upvalues.size())
    r.fail("header says " + std::to_string(nup) + " upvalues, main function has " +
           std::to_string(main.upvalues.size()));
  if (!r.at_end()) r.fail("trailing bytes after the main function");
  return main;
}

}  // namespace tc::vm
