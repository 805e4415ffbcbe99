// tc::vm::Runtime: embed tc's Lua 5.4 runtime in a C++ program.
//
//   #include <tc/vm/runtime.h>
//   using namespace tc::vm;
//
//   int main() {
//     Runtime rt;                                      // Lua 5.4, its standard libraries, `require "tc"`
//     rt.run_string(R"(
//       local tc = require "tc"
//       function scale(x, s) return x * s, x:sum():item() end
//     )");
//
//     float host[6] = {1, 2, 3, 4, 5, 6};
//     tc::Tensor x = from_host(host, {2, 3}, tc::DType::Float32);    // copies host memory
//     tc::Tensor b = borrow_host(host, {2, 3}, tc::DType::Float32);  // no copy: must outlive b
//
//     Results r = rt.global("scale")(x, 2.0);          // call a global Lua function
//     tc::Tensor y = r[0].tensor();                     // [[2, 4, 6], [8, 10, 12]]
//     double total = r[1].number();                     // 21
//     float out[6];
//     to_host(y, out, sizeof out);                      // copies the tensor out
//
//     Ref model = rt.run_file("model.lua")[0];          // a script returning a table of functions
//     tc::Tensor o = model["forward"](b)[0].tensor();
//
//     // A C++ function callable from Lua (arguments and results are tc::Values: tensors,
//     // numbers, booleans, strings, lists). Throwing tc::Error raises a tc error of that kind.
//     rt.register_function("host_norm", [](const Values& a) -> Values {
//       return {a[0].tensor().numel() * 1.0};
//     });
//     rt.run_string("assert(host_norm(require'tc'.ones(2, 2)) == 4)");
//
//     try {
//       rt.run_string("local tc = require 'tc'\nreturn tc.ones(2, 3):matmul(tc.ones(2, 3))", "=setup");
//     } catch (const LuaError& e) {
//       // e.what(): "setup:2: mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"
//       // e.kind(): "ShapeError" (empty for plain Lua errors); e.traceback(): Lua's stack traceback
//     }
//   }
//
// Every call into Lua is protected: Lua errors become LuaError exceptions, never longjmps through
// the caller. A Runtime is single-threaded, like the lua_State it owns; Refs keep that state alive.
#pragma once
#include <concepts>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "tc/value.h"

struct lua_State;

namespace tc::vm {

// A Lua error seen from C++: the message as Lua prints it ("file.lua:LINE: message"), the tc
// error kind when the error is a tc error table ("ShapeError", ...; empty otherwise), and the
// traceback of the failing Lua stack.
class LuaError : public std::runtime_error {
 public:
  LuaError(std::string message, std::string kind, std::string traceback)
      : std::runtime_error(std::move(message)), kind_(std::move(kind)), traceback_(std::move(traceback)) {}
  const std::string& kind() const { return kind_; }
  const std::string& traceback() const { return traceback_; }

 private:
  std::string kind_, traceback_;
};

namespace detail {
struct State;
}
class Ref;
using Results = std::vector<Ref>;
using Values = std::vector<Value>;
using HostFunction = std::function<Values(const Values& args)>;

// An argument for a Lua call: any tc::Value (tensor, number, boolean, string, lists) or a Ref.
class Arg {
 public:
  template <class T>
    requires std::constructible_from<Value, T>
  Arg(T&& v) : v_(Value(std::forward<T>(v))) {}
  Arg(const Ref& r);
  const std::variant<Value, std::shared_ptr<const Ref>>& data() const { return v_; }

 private:
  std::variant<Value, std::shared_ptr<const Ref>> v_;
};

// A reference to a Lua value (function, table, tensor, number ...) held in the runtime.
class Ref {
 public:
  Ref(const Ref& o);
  Ref& operator=(const Ref& o);
  ~Ref();

  // Calls the value (a function or a callable table) with the arguments.
  Results call(const std::vector<Arg>& args) const;
  template <class... A>
  Results operator()(A&&... args) const {
    return call(std::vector<Arg>{Arg(std::forward<A>(args))...});
  }
  // Field access (t[key], metamethods included).
  Ref operator[](const std::string& key) const;
  Ref operator[](int64_t index) const;

  std::string type_name() const;  // Lua's type name: "nil", "number", "table", "userdata" ...
  bool is_nil() const;
  bool is_tensor() const;
  bool is_function() const;
  // Conversions; each throws tc::Error (ValueError) naming the actual type when the value is not
  // of that kind.
  Tensor tensor() const;
  double number() const;
  int64_t integer() const;
  bool boolean() const;  // Lua truthiness
  std::string string() const;
  Value value() const;  // tensor, number, boolean, string, nil, or an array of numbers/tensors

 private:
  friend class Runtime;
  friend struct detail::State;
  Ref(std::shared_ptr<detail::State> s, int ref) : s_(std::move(s)), ref_(ref) {}
  void push() const;
  std::shared_ptr<detail::State> s_;
  int ref_;
};

class Runtime {
 public:
  // `host` names the embedding program (tcrun says "tcrun"); tc reads it to know it is embedded.
  explicit Runtime(const char* host = "embedded");
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Loads and runs a file or a string chunk; returns what the chunk returns. `args` reach the
  // chunk as `...`. Chunk names follow Lua: "=name" is used as is, "@file" names a file.
  Results run_file(const std::string& path, const std::vector<Arg>& args = {});
  Results run_string(const std::string& code, const std::string& chunkname = "=(string)",
                     const std::vector<Arg>& args = {});

  Ref global(const std::string& name) const;  // dotted paths allowed: "tc.nn.Linear"
  void set_global(const std::string& name, const Arg& value);
  Ref require(const std::string& module);
  // Makes `fn` a global Lua function `name`.
  void register_function(const std::string& name, HostFunction fn);

  lua_State* state() const;

 private:
  std::shared_ptr<detail::State> s_;
};

// Tensors from host memory: a copy, or a view of the caller's memory (`data` must stay valid for
// as long as the tensor and its views live). Contiguous, row-major.
Tensor from_host(const void* data, const Shape& sizes, DType dtype);
Tensor borrow_host(void* data, const Shape& sizes, DType dtype);
// Copies a tensor's elements (any layout/device) into `dst` as contiguous row-major; throws
// ValueError when `nbytes` is not the tensor's size in bytes.
void to_host(const Tensor& t, void* dst, size_t nbytes);

}  // namespace tc::vm
