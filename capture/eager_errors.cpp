// Errors of compiled code worded as eager Lua words them: the name of a value as Lua's debug
// interface finds it in the bytecode ("method 'frobnicate'", "global 'f'", "local 'x'"), so a
// call at a graph break that fails says what the uncompiled function would have said.
#include <cstring>

#include "capture_state.h"
#include "opcodes.h"
#include "proto.h"

namespace tc::capture {

namespace {

using vm::Ins;
using vm::OpCode;

std::string constant_name(const vm::Proto& p, int k) {
  return k < int(p.k.size()) && p.k[k].is_string() ? p.k[k].s : "?";
}

std::string upvalue_name(const vm::Proto& p, int n) {
  return n < int(p.upvalue_names.size()) && p.upvalue_names[n] ? *p.upvalue_names[n] : "?";
}

// The last instruction before `lastpc` that certainly set register `reg` (-1: none, or only
// inside a branch that jumps over `lastpc`), as Lua's findsetreg decides it.
int last_setter(const vm::Proto& p, int lastpc, int reg) {
  if (lastpc < int(p.code.size()) && vm::decode(p.code[lastpc]).info().mm) lastpc--;
  int setter = -1, jump_target = 0;
  for (int pc = 0; pc < lastpc; pc++) {
    const Ins i = vm::decode(p.code[pc]);
    bool sets;
    switch (i.op) {
      case OpCode::LOADNIL:
        sets = i.a <= reg && reg <= i.a + i.b;
        break;
      case OpCode::TFORCALL:
        sets = reg >= i.a + 2;
        break;
      case OpCode::CALL:
      case OpCode::TAILCALL:
        sets = reg >= i.a;
        break;
      case OpCode::JMP: {
        const int dest = pc + 1 + i.sj;
        if (dest <= lastpc && dest > jump_target) jump_target = dest;
        sets = false;
        break;
      }
      default:
        sets = i.info().sets_a && reg == i.a;
        break;
    }
    if (sets) setter = pc < jump_target ? -1 : pc;
  }
  return setter;
}

// "global" or "field": a table read through _ENV is a global.
std::string table_kind(const vm::Proto& p, int pc, const Ins& i, bool upvalue) {
  std::string name;
  if (upvalue)
    name = upvalue_name(p, i.b);
  else
    object_kind(p, pc, i.b, &name);
  return name == "_ENV" ? "global" : "field";
}

}  // namespace

std::string chunk_id(const std::string& source) {
  constexpr size_t kIdSize = 60 - 1;  // LUA_IDSIZE, less the terminator
  if (!source.empty() && source[0] == '=') return source.substr(1, kIdSize);
  if (!source.empty() && source[0] == '@') {
    if (source.size() - 1 <= kIdSize) return source.substr(1);
    return "..." + source.substr(source.size() - (kIdSize - 3));
  }
  const size_t room = kIdSize - std::strlen("[string \"...\"]");
  const size_t nl = source.find('\n');
  if (source.size() < room && nl == std::string::npos) return "[string \"" + source + "\"]";
  return "[string \"" + source.substr(0, std::min(nl, room)) + "...\"]";
}

std::string object_kind(const vm::Proto& p, int pc, int reg, std::string* name) {
  *name = vm::local_name(p, reg, pc);
  if (!name->empty()) return "local";
  const int at = last_setter(p, pc, reg);
  if (at < 0) return "";
  const Ins i = vm::decode(p.code[at]);
  switch (i.op) {
    case OpCode::MOVE:
      if (i.b < i.a) return object_kind(p, at, i.b, name);
      return "";
    case OpCode::GETTABUP:
      *name = constant_name(p, i.c);
      return table_kind(p, at, i, true);
    case OpCode::GETTABLE: {
      std::string key;
      *name = object_kind(p, at, i.c, &key) == "constant" ? key : "?";
      return table_kind(p, at, i, false);
    }
    case OpCode::GETI:
      *name = "integer index";
      return "field";
    case OpCode::GETFIELD:
      *name = constant_name(p, i.c);
      return table_kind(p, at, i, false);
    case OpCode::GETUPVAL:
      *name = upvalue_name(p, i.b);
      return "upvalue";
    case OpCode::LOADK:
    case OpCode::LOADKX: {
      const int k = i.op == OpCode::LOADK ? i.bx : vm::decode(p.code[at + 1]).ax;
      if (k >= int(p.k.size()) || !p.k[k].is_string()) return "";
      *name = p.k[k].s;
      return "constant";
    }
    case OpCode::SELF: {
      if (i.k) {
        *name = constant_name(p, i.c);
      } else {
        std::string key;
        *name = object_kind(p, at, i.c, &key) == "constant" ? key : "?";
      }
      return "method";
    }
    default:
      return "";
  }
}

bool push_call_error(lua_State* L, const vm::Proto& p, int pc, int callee, int fn_idx) {
  if (lua_type(L, callee) == LUA_TFUNCTION) return false;
  if (luaL_getmetafield(L, callee, "__call") != LUA_TNIL) {
    lua_pop(L, 1);
    return false;
  }
  std::string name;
  const std::string kind = object_kind(p, pc, vm::decode(p.code[pc]).a, &name);
  std::string type = luaL_typename(L, callee);
  if (luaL_getmetafield(L, callee, "__name") != LUA_TNIL) {
    if (lua_type(L, -1) == LUA_TSTRING) type = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  const std::vector<int> lines = vm::decode_lines(p);
  const int line = pc < int(lines.size()) ? lines[pc] : -1;
  lua_Debug ar;
  lua_pushvalue(L, fn_idx);
  lua_getinfo(L, ">S", &ar);
  std::string where = line > 0 ? std::string(ar.short_src) + ":" + std::to_string(line) + ": " : "";
  std::string msg = where + "attempt to call a " + type + " value";
  if (!kind.empty()) msg += " (" + kind + " '" + name + "')";
  lua_pushlstring(L, msg.data(), msg.size());
  return true;
}

}  // namespace tc::capture
