// The Lua binding's internal interface: tensor userdata, Lua <-> tc::Value conversion, error
// tables raised at the user's line, and the guard that keeps C++ exceptions from crossing Lua.
// Used by the binding files in stdlib/lua and by vm/runtime.cpp (the embedding API).
//
// Rule for every C function of the binding: do all C++ work inside `guarded(L, fn)`. `fn` may
// throw tc::Error (or any std::exception); guarded converts it into a tc error table and calls
// lua_error only after every C++ object of `fn` is destroyed. `fn` itself must not call Lua API
// functions that raise (luaL_check*, lua_gettable with metamethods, lua_call): read arguments
// with the non-raising ones and throw tc::Error instead.
#pragma once
#include <lua.hpp>

#include <optional>
#include <string>
#include <type_traits>

#include "tc/ops.h"

namespace tc::lua {

// ---- tensors ---------------------------------------------------------------------------------
// Pushes a new tensor userdata. (Op functions give back an argument's own userdata when a result
// is that argument, so `x:add_(y)` returns `x` itself; `x.grad` is cached per tensor.)
void push_tensor(lua_State* L, const Tensor& t);
// The tensor at `idx`, or null if the value is not a tensor userdata.
const Tensor* to_tensor(lua_State* L, int idx);
// Throws ValueError naming `what` when the value at `idx` is not a tensor.
const Tensor& check_tensor(lua_State* L, int idx, const char* what);
// Tells Lua's collector about tensor bytes allocated since the last call (so loops that make
// many tensors do not grow without bound). Call outside of `guarded` bodies' C++ scopes.
void gc_pressure(lua_State* L);
// Called by gc_pressure (so after each tensor op run from Lua) while not null: capture sets it, on
// its thread, while a function `tcrun --compile-all` skipped as pure Lua runs uncompiled
// (capture/dispatch.cpp). Per thread, as gc_pressure's counts are.
extern thread_local void (*g_tensor_work_hook)(lua_State* L);

// ---- values -----------------------------------------------------------------------------------
// Lua value -> Value: tensor, integer, float, boolean, string, dtype object, nil, and tables
// (a tc.Size or array of integers -> IntList, numbers -> FloatList, tensors -> TensorList).
// Throws ValueError for anything else; `what` names the argument in the message.
Value to_value(lua_State* L, int idx, const char* what);
void push_value(lua_State* L, const Value& v);
// A plain table (no metatable) with at least one string key: an options table.
bool is_options_table(lua_State* L, int idx);
// The DType of a dtype object or dtype name at idx; false if it is neither.
bool to_dtype(lua_State* L, int idx, DType* out);
void push_dtype(lua_State* L, DType t);
void push_size(lua_State* L, const Shape& s);  // a tc.Size

// ---- errors ----------------------------------------------------------------------------------
// Pushes an error table {kind=, message=, file=, line=} with metatable tc.<Kind>; file and line
// are the user's: the first Lua frame at or above `level` that is not one of tc's embedded
// chunks (chunk names starting with "@[tc]/").
void push_error(lua_State* L, const char* kind, const char* message, int level = 1);
// Pushes the error and raises it (does not return).
[[noreturn]] void raise_error(lua_State* L, const char* kind, const char* message);

// Runs fn(L) -> number of results, catching C++ exceptions (see the rule above).
namespace detail {
int run_caught(lua_State* L, int (*thunk)(lua_State*, void*), void* fn);
[[noreturn]] void raise_pending(lua_State* L);  // error kind and message pushed by run_caught
}  // namespace detail
template <class F>
int guarded(lua_State* L, F fn) {
  static_assert(std::is_trivially_destructible_v<F>, "guarded bodies must not capture C++ objects");
  int n = detail::run_caught(L, [](lua_State* L, void* f) { return (*static_cast<F*>(f))(L); }, &fn);
  if (n < 0) detail::raise_pending(L);
  return n;
}

// ---- library pieces (each file registers its part into the tc table at the top of the stack) --
void open_tensor_type(lua_State* L);   // lua_tensor.cpp: metatable, C methods (tc table at -1)
void open_ops(lua_State* L);           // lua_ops.cpp: one function per ops.def row
// lua_ops.cpp: if the value at idx is one of the op functions made by open_ops (tc.sin,
// x.add ...), which op it calls; nullopt for any other value. Pushes nothing.
std::optional<Op> op_of(lua_State* L, int idx);
void open_distributed(lua_State* L);  // lua_distributed.cpp: tc._C.dist_* (tc.distributed.lua)
void open_errors(lua_State* L);        // lua_errors.cpp: tc.ShapeError ... metatables
void open_create(lua_State* L);        // lua_create.cpp: tc.tensor, x:tolist(), x:item()
void open_autograd(lua_State* L);      // lua_autograd.cpp: x:backward(), tc.autograd, hooks
void push_grad_fn(lua_State* L, const Tensor& t);  // lua_autograd.cpp: x.grad_fn
std::string format_tensor(const Tensor& t);  // tensor_format.cpp: PyTorch's repr
std::string tensor_footer(const Tensor& t);  // "[tc.float32 of size 2x3 on cpu]"
int l_printoptions(lua_State* L);  // tensor_format.cpp: tc._C.printoptions (tc.set_printoptions)

// tc's Lua-side functions (tc.max, x:to, tc.no_grad ...) are reached through C trampolines, so
// that an error under a tail call (`return x:max(y)` in user code) still finds the user's frame:
// Lua replaces the caller's frame on a tail call to a Lua function, but not to a C function.
// tc_open_library wraps the tc._* parts; Lua code that installs functions into tc later, or
// metamethods reached from user code (a module's __call), should use tc._C.wrap(f) or
// tc._C.wrap_functions(t). If the function at idx is such a
// trampoline, pushes the Lua function it calls and returns true (the tracer inlines that one);
// otherwise pushes nothing and returns false.
bool trampoline_target(lua_State* L, int idx);

// Grad mode (tc.no_grad / tc.enable_grad): tc::grad_enabled() of tc/autograd.h.
bool grad_enabled();
void set_grad_enabled(bool on);

// Registry keys.
inline constexpr const char* kTensorMeta = "tc.Tensor";
inline constexpr const char* kSizeMeta = "tc.Size";
inline constexpr const char* kDTypeMeta = "tc.dtype";
// Set by hosts that embed tc (tcrun, the embedding API): a string naming the host. Absent
// under stock lua5.4.
inline constexpr const char* kHostKey = "tc.host";

}  // namespace tc::lua
