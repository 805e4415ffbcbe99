// Byte snapshots of Lua tables: the cheap "nothing changed since last time" test behind the
// guard fast path (guards.cpp).
//
// Lua gives no version counter on tables and no hook on writes to existing keys, so proving that
// a module table is unchanged through the public API means re-reading every field (tens of
// microseconds for a 64-layer model). Instead we compare the table's storage with a copy taken
// when the guards last passed: header (array and node pointers and sizes, metatable), the array
// part and the node (hash) part. Equal bytes mean the same keys holding the same values, so every
// guard that passed on a value read from the table passes again. Any write (a new value, a
// rehash, setmetatable) changes bytes; a change that is not semantic (a dead key cleared by the
// collector, a length hint) only sends the call through the full check once.
//
// This reads the layout of Lua 5.4's Table (lobject.h) for the Lua we link statically
// (Debian's 5.4.4). The layout is checked against the public API at first use
// (`snapshots_work`); if anything disagrees the fast path stays off and guards take the full
// check, so a different Lua can cost speed but never correctness.
#pragma once
#include <lua.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tc::capture {

// What the snapshot needs of Lua 5.4's `Table`. Only pointers and sizes are interpreted; node and
// array contents are compared as bytes.
struct LuaTableView {
  void* gc_next;
  uint8_t tt, marked;
  uint8_t flags;      // bit 7 (BITRAS): `alimit` is not the real size of the array part
  uint8_t lsizenode;  // log2 of the node count
  unsigned int alimit;
  const unsigned char* array;  // TValue[real array size]
  const unsigned char* node;   // Node[1 << lsizenode]
  const void* lastfree;
  const void* metatable;
  const void* gclist;
};
static_assert(sizeof(LuaTableView) == 56, "Lua 5.4 Table is 56 bytes on LP64");

constexpr size_t kLuaTValueSize = 16;  // Value (8) + tag (1), padded
constexpr size_t kLuaNodeSize = 24;    // value (8) + tags (2) + next (4) + key (8)

struct TableShape {
  const unsigned char* array;
  const unsigned char* node;
  const void* metatable;
  uint32_t array_bytes, node_bytes;
  unsigned int alimit;
  uint8_t lsizenode, bitras;
};

inline const LuaTableView* table_view(const void* table) {
  return static_cast<const LuaTableView*>(table);
}

// The shape of a table (the pointer lua_topointer gives for a table value).
TableShape table_shape(const void* table);

// Appends the array and node bytes of the table of shape `s` to `out`.
void append_table_bytes(const TableShape& s, std::vector<unsigned char>& out);

// True iff the table's shape equals `s` and its bytes equal `bytes` (s.array_bytes then
// s.node_bytes long).
bool table_unchanged(const void* table, const TableShape& s, const unsigned char* bytes);

// Starts loading a table's header and storage into the cache (checks of many scattered tables
// would otherwise wait for each in turn).
inline void prefetch_table(const void* table, const TableShape& s) {
  __builtin_prefetch(table);
  for (uint32_t o = 0; o < s.node_bytes; o += 64) __builtin_prefetch(s.node + o);
  for (uint32_t o = 0; o < s.array_bytes; o += 64) __builtin_prefetch(s.array + o);
}

// Checks the layout against the public API once per process (see the file comment). Off also
// under TC_GUARD_FASTPATH=0.
bool snapshots_work(lua_State* L);
// Turns the fast path off or back on at run time (tc.compiler._set_guard_fast_path).
void set_snapshots_enabled(bool on);

}  // namespace tc::capture
