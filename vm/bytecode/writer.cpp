// Writes a Proto tree as a Lua 5.4 binary chunk, byte for byte as lua_dump would.
#include <cstring>

#include "chunk_format.h"
#include "proto.h"

namespace tc::vm {
namespace {

class Writer {
 public:
  std::string out;

  void byte(uint8_t b) { out.push_back(char(b)); }
  void raw(const void* p, size_t n) {
    if (n > 0) out.append(static_cast<const char*>(p), n);
  }
  void unsigned_(uint64_t x) {
    uint8_t buf[10];
    int n = 0;
    do {
      buf[n++] = x & 0x7F;
      x >>= 7;
    } while (x != 0);
    buf[0] |= 0x80;  // the least significant group is written last and carries the end mark
    while (n > 0) byte(buf[--n]);
  }
  void int_(int x) {
    if (x < 0) throw BytecodeError("cannot write negative size or line " + std::to_string(x));
    unsigned_(uint64_t(x));
  }
  void string(const std::optional<std::string>& s) {
    if (!s) return unsigned_(0);
    unsigned_(s->size() + 1);
    raw(s->data(), s->size());
  }
  void function(const Proto& f, const std::optional<std::string>& parent_source);
};

void Writer::function(const Proto& f, const std::optional<std::string>& parent_source) {
  if (f.source == parent_source)
    string(std::nullopt);
  else
    string(f.source);
  int_(f.linedefined);
  int_(f.lastlinedefined);
  byte(f.numparams);
  byte(f.is_vararg);
  byte(f.maxstacksize);
  int_(int(f.code.size()));
  raw(f.code.data(), f.code.size() * 4);
  int_(int(f.k.size()));
  for (const Constant& c : f.k) {
    byte(uint8_t(c.tag));
    switch (c.tag) {
      case ConstTag::Nil:
      case ConstTag::False:
      case ConstTag::True:
        break;
      case ConstTag::Int:
        raw(&c.i, 8);
        break;
      case ConstTag::Float:
        raw(&c.f, 8);
        break;
      case ConstTag::ShortStr:
      case ConstTag::LongStr:
        string(c.s);
        break;
    }
  }
  int_(int(f.upvalues.size()));
  for (const UpvalDesc& u : f.upvalues) {
    byte(u.instack);
    byte(u.idx);
    byte(u.kind);
  }
  int_(int(f.protos.size()));
  for (const Proto& child : f.protos) function(child, f.source);
  int_(int(f.lineinfo.size()));
  raw(f.lineinfo.data(), f.lineinfo.size());
  int_(int(f.abslineinfo.size()));
  for (const AbsLineInfo& a : f.abslineinfo) {
    int_(a.pc);
    int_(a.line);
  }
  int_(int(f.locvars.size()));
  for (const LocVar& v : f.locvars) {
    string(v.name);
    int_(v.startpc);
    int_(v.endpc);
  }
  int_(int(f.upvalue_names.size()));
  for (const auto& name : f.upvalue_names) string(name);
}

}  // namespace

std::string write_chunk(const Proto& main) {
  if (main.upvalues.size() > 255) throw BytecodeError("main function has more than 255 upvalues");
  Writer w;
  w.raw(chunk::kSignature, 4);
  w.byte(chunk::kVersion);
  w.byte(chunk::kFormat);
  w.raw(chunk::kData, 6);
  w.byte(chunk::kInstructionSize);
  w.byte(chunk::kIntegerSize);
  w.byte(chunk::kNumberSize);
  int64_t i = chunk::kCheckInt;
  w.raw(&i, 8);
  double n = chunk::kCheckNum;
  w.raw(&n, 8);
  w.byte(uint8_t(main.upvalues.size()));
  w.function(main, std::nullopt);
  return std::move(w.out);
}

}  // namespace tc::vm
