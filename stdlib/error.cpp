// Error kinds and the throwing helpers.
#include "tc/error.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace tc {

const char* error_kind_name(ErrorKind k) {
  switch (k) {
#define X(k)          \
  case ErrorKind::k:  \
    return #k;
    TC_ERROR_KINDS(X)
#undef X
  }
  return "Error";
}

void throw_error(ErrorKind kind, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw Error(kind, buf);
}

void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  fprintf(stderr, "tc internal error: %s (%s) at %s:%d\n", msg, expr, file, line);
  abort();
}

}  // namespace tc
