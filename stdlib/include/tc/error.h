// User-facing errors of the tensor core: a kind (ShapeError, ...) and a PyTorch-like message.
// The Lua binding turns them into error tables raised at the user's line.
#pragma once
#include <stdexcept>
#include <string>

namespace tc {

#define TC_ERROR_KINDS(X) \
  X(ShapeError)           \
  X(DTypeError)           \
  X(DeviceError)          \
  X(IndexError)           \
  X(ValueError)           \
  X(CompileError)         \
  X(GraphBreakError)      \
  X(OutOfMemoryError)     \
  X(NotImplementedError)  \
  X(IOError)

enum class ErrorKind {
#define X(k) k,
  TC_ERROR_KINDS(X)
#undef X
};
const char* error_kind_name(ErrorKind k);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Formats like printf and throws tc::Error: TC_CHECK(cond, ShapeError, "bad %d", n).
[[noreturn]] void throw_error(ErrorKind kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
#define TC_CHECK(cond, kind, ...) \
  do {                            \
    if (!(cond)) ::tc::throw_error(::tc::ErrorKind::kind, __VA_ARGS__); \
  } while (0)
#define TC_FAIL(kind, ...) ::tc::throw_error(::tc::ErrorKind::kind, __VA_ARGS__)

// A bug in tc, not a user mistake: abort with a message.
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* msg);
#define TC_ASSERT(cond, msg) \
  do {                       \
    if (!(cond)) ::tc::assert_fail(#cond, __FILE__, __LINE__, msg); \
  } while (0)

}  // namespace tc
