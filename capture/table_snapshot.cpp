// Table byte snapshots and the one-time layout check (see table_snapshot.h).
#include "table_snapshot.h"

#include <cstdlib>
#include <cstring>

#include <emmintrin.h>

namespace tc::capture {

namespace {

uint32_t real_array_size(const LuaTableView* t) {
  if (!(t->flags & 0x80)) return t->alimit;  // BITRAS clear: alimit is the size
  uint32_t n = 1;                            // else: the smallest power of 2 >= alimit
  while (n < t->alimit) n <<= 1;
  return n;
}

// A TValue's integer payload and tag, read the way the snapshot lays them out.
bool tvalue_is_int(const unsigned char* tv, int64_t v) {
  int64_t got;
  std::memcpy(&got, tv, 8);
  return tv[8] == 3 /* LUA_VNUMINT */ && got == v;
}

bool check_layout(lua_State* L) {
  const int top = lua_gettop(L);
  bool ok = true;
  lua_createtable(L, 2, 1);
  const int t = lua_gettop(L);
  lua_pushinteger(L, 10);
  lua_rawseti(L, t, 1);
  lua_pushinteger(L, 20);
  lua_rawseti(L, t, 2);
  lua_pushinteger(L, 7);
  lua_setfield(L, t, "key");
  lua_newtable(L);
  const void* mt = lua_topointer(L, -1);
  lua_setmetatable(L, t);
  const void* p = lua_topointer(L, t);
  const LuaTableView* v = table_view(p);
  TableShape s = table_shape(p);
  ok = ok && v->tt == 5 /* LUA_VTABLE */ && v->metatable == mt && s.array_bytes == 2 * kLuaTValueSize &&
       v->lsizenode == 0 && tvalue_is_int(v->array, 10) &&
       tvalue_is_int(v->array + kLuaTValueSize, 20) && tvalue_is_int(v->node, 7);
  if (ok) {
    // the node's key is the interned string "key"
    lua_pushstring(L, "key");
    const void* key = lua_topointer(L, -1);
    lua_pop(L, 1);
    const void* got;
    std::memcpy(&got, v->node + 16, sizeof got);
    ok = got == key;
  }
  // every kind of write changes the snapshot
  std::vector<unsigned char> bytes;
  auto snap = [&] {
    s = table_shape(p);
    bytes.clear();
    append_table_bytes(s, bytes);
  };
  auto changed = [&] { return !table_unchanged(p, s, bytes.data()); };
  if (ok) {
    snap();
    ok = !changed();
    lua_pushinteger(L, 8);
    lua_setfield(L, t, "key");
    ok = ok && changed();
    snap();
    lua_pushboolean(L, 1);
    lua_rawseti(L, t, 2);
    ok = ok && changed();
    snap();
    lua_pushinteger(L, 1);
    lua_setfield(L, t, "new");  // rehash: the node part grows
    ok = ok && changed();
    snap();
    lua_pushnil(L);
    lua_setmetatable(L, t);
    ok = ok && changed();
  }
  lua_settop(L, top);
  return ok;
}

}  // namespace

TableShape table_shape(const void* table) {
  const LuaTableView* t = table_view(table);
  return TableShape{t->array,
                    t->node,
                    t->metatable,
                    uint32_t(real_array_size(t) * kLuaTValueSize),
                    uint32_t((size_t(1) << t->lsizenode) * kLuaNodeSize),
                    t->alimit,
                    t->lsizenode,
                    uint8_t(t->flags & 0x80)};
}

void append_table_bytes(const TableShape& s, std::vector<unsigned char>& out) {
  out.insert(out.end(), s.array, s.array + s.array_bytes);
  out.insert(out.end(), s.node, s.node + s.node_bytes);
}

// Equality of n bytes (a multiple of 8), 16 at a time. Not memcmp: glibc's AVX-512 memcmp
// stalls for ~80 ns per call on short inputs on our dev VM (339 small tables cost 57 us).
static bool same_bytes(const unsigned char* a, const unsigned char* b, size_t n) {
  __m128i diff = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    diff = _mm_or_si128(diff, _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)),
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i))));
  if (i < n)
    diff = _mm_or_si128(diff, _mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + i)),
                                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + i))));
  return _mm_movemask_epi8(_mm_cmpeq_epi8(diff, _mm_setzero_si128())) == 0xFFFF;
}

bool table_unchanged(const void* table, const TableShape& s, const unsigned char* bytes) {
  const LuaTableView* t = table_view(table);
  if (t->node != s.node || t->array != s.array || t->metatable != s.metatable ||
      t->alimit != s.alimit || t->lsizenode != s.lsizenode || uint8_t(t->flags & 0x80) != s.bitras)
    return false;
  return same_bytes(s.array, bytes, s.array_bytes) &&
         same_bytes(s.node, bytes + s.array_bytes, s.node_bytes);
}

static bool g_enabled = true;
void set_snapshots_enabled(bool on) { g_enabled = on; }

bool snapshots_work(lua_State* L) {
  if (!g_enabled) return false;
  static const bool ok = [&] {
    const char* env = std::getenv("TC_GUARD_FASTPATH");
    if (env && std::strcmp(env, "0") == 0) return false;
    return check_layout(L);
  }();
  return ok;
}

}  // namespace tc::capture
