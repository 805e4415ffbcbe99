// tc._C.map_file: a tensor over a binary file (tc.from_file, stdlib/lua/tc._from_file.lua), either
// a private memory mapping of the file (nothing is read until touched) or a plain read into memory.
//
// The mapping is MAP_PRIVATE (copy-on-write): reads see the file's bytes, a write to the tensor
// changes only this process's copy of the page it lands on, never the file. The storage's deleter
// unmaps, so the mapping lives exactly as long as some tensor (or view) over it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lua_binding.h"

namespace tc::lua {
namespace {

// Element types a file may hold that tc has no dtype for: the tensor made over such a file is
// uint8 with one more dimension of `itemsize` bytes (little-endian); tc._from_file.lua decodes
// windows of it into `widened`.
struct FileType {
  const char* name;
  int itemsize;
};
constexpr FileType kByteTypes[] = {{"uint16", 2}, {"int16", 2}, {"uint32", 4}, {"int8", 1}};

struct Mapping {
  void* base;
  size_t length;
};

void unmap(void*, void* ctx) {
  auto* m = static_cast<Mapping*>(ctx);
  munmap(m->base, m->length);
  delete m;
}

// Closes the descriptor on every path out (tc::Error included).
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

std::shared_ptr<Storage> map_bytes(int fd, int64_t offset, int64_t nbytes, const char* path) {
  int64_t page = sysconf(_SC_PAGESIZE);
  int64_t start = offset / page * page, delta = offset - start;
  size_t length = (size_t)(delta + nbytes);
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)start);
  TC_CHECK(p != MAP_FAILED, IOError, "tc.from_file: cannot map '%s' (%lld bytes from offset %lld): %s", path,
           (long long)nbytes, (long long)offset, std::strerror(errno));
  return Storage::wrap(static_cast<char*>(p) + delta, (size_t)nbytes, Device{}, unmap, new Mapping{p, length});
}

void read_bytes(int fd, int64_t offset, int64_t nbytes, char* out, const char* path) {
  int64_t done = 0;
  while (done < nbytes) {
    ssize_t n = pread(fd, out + done, (size_t)(nbytes - done), (off_t)(offset + done));
    if (n < 0 && errno == EINTR) continue;
    TC_CHECK(n > 0, IOError, "tc.from_file: reading '%s' failed after %lld of %lld bytes: %s", path, (long long)done,
             (long long)nbytes, n < 0 ? std::strerror(errno) : "the file got shorter");
    done += n;
  }
}

// tc._C.map_file(path, dtype, offset, shape|nil, mmap) -> tensor. dtype: a tc dtype (object or
// name) or one of kByteTypes' names. shape nil: 1-D over every element after offset.
int c_map_file(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TC_CHECK(lua_type(L, 1) == LUA_TSTRING, ValueError, "tc.from_file(path): path must be a string, got %s",
             luaL_typename(L, 1));
    const char* path = lua_tostring(L, 1);
    DType dtype = DType::UInt8;
    int byte_item = 0;  // > 0: a kByteTypes type of that many bytes
    const char* type_name = nullptr;
    if (!to_dtype(L, 2, &dtype)) {
      for (const FileType& t : kByteTypes)
        if (lua_type(L, 2) == LUA_TSTRING && std::strcmp(lua_tostring(L, 2), t.name) == 0) byte_item = t.itemsize, type_name = t.name;
      TC_CHECK(byte_item > 0, DTypeError,
               "tc.from_file: unsupported dtype %s (tc dtypes such as tc.float32, tc.int32, tc.uint8, or the file "
               "types \"uint16\", \"int16\", \"uint32\", \"int8\")",
               lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : luaL_typename(L, 2));
    } else {
      type_name = dtype_name(dtype);
    }
    int64_t item = byte_item > 0 ? byte_item : (int64_t)itemsize(dtype);
    TC_CHECK(lua_isinteger(L, 3) && lua_tointeger(L, 3) >= 0, ValueError,
             "tc.from_file: offset must be an integer >= 0 (bytes), got %s", luaL_typename(L, 3));
    int64_t offset = lua_tointeger(L, 3);
    bool have_shape = !lua_isnoneornil(L, 4);
    Shape shape;
    if (have_shape) {
      Value v = to_value(L, 4, "shape");
      if (v.is_tensor_list() && v.tensors().empty()) v = Value(IntList{});
      TC_CHECK(v.is_int_list(), ValueError, "tc.from_file: shape must be a list of integers");
      shape = v.ints();
      for (auto s : shape)
        TC_CHECK(s >= 0, ShapeError, "tc.from_file: negative dimension %lld in shape %s", (long long)s,
                 shape_string(shape).c_str());
    }
    bool use_mmap = lua_isnoneornil(L, 5) || lua_toboolean(L, 5);

    Fd f{open(path, O_RDONLY | O_CLOEXEC)};
    TC_CHECK(f.fd >= 0, IOError, "tc.from_file: cannot open '%s': %s", path, std::strerror(errno));
    struct stat st;
    TC_CHECK(fstat(f.fd, &st) == 0, IOError, "tc.from_file: cannot stat '%s': %s", path, std::strerror(errno));
    TC_CHECK(S_ISREG(st.st_mode), IOError, "tc.from_file: '%s' is not a regular file%s", path,
             S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
    int64_t size = (int64_t)st.st_size;
    TC_CHECK(offset <= size, ValueError, "tc.from_file: offset %lld is past the end of '%s' (%lld bytes)",
             (long long)offset, path, (long long)size);
    TC_CHECK(offset % item == 0, ValueError,
             "tc.from_file: offset %lld is not a multiple of the %s item size (%lld bytes)", (long long)offset,
             type_name, (long long)item);
    int64_t avail = size - offset;
    if (!have_shape) {
      TC_CHECK(avail % item == 0, ValueError,
               "tc.from_file: '%s' has %lld bytes after offset %lld, not a whole number of %s items (%lld bytes each)",
               path, (long long)avail, (long long)offset, type_name, (long long)item);
      shape = {avail / item};
    }
    int64_t nbytes = checked_mul(shape_numel(shape), item, "tc.from_file: shape × itemsize");
    TC_CHECK(nbytes == avail, ValueError,
             "tc.from_file: '%s' has %lld bytes after offset %lld, but shape %s of %s needs %lld (numel × %lld); "
             "the file size must match shape × itemsize",
             path, (long long)avail, (long long)offset, shape_string(shape).c_str(), type_name, (long long)nbytes,
             (long long)item);
    if (byte_item > 0) shape.push_back(byte_item), dtype = DType::UInt8;

    Tensor t;
    if (nbytes == 0 || !use_mmap) {
      t = Tensor::empty(shape, dtype);
      if (nbytes > 0) read_bytes(f.fd, offset, nbytes, static_cast<char*>(t.data_ptr()), path);
    } else {
      auto impl = std::make_shared<TensorImpl>();
      impl->storage = map_bytes(f.fd, offset, nbytes, path);
      impl->sizes = shape;
      impl->strides = contiguous_strides(shape);
      impl->dtype = dtype;
      t = Tensor(std::move(impl));
    }
    push_tensor(L, t);
    return 1;
  });
}

}  // namespace

void open_from_file(lua_State* L) {
  // tc table at -1
  lua_getfield(L, -1, "_C");
  lua_pushcfunction(L, c_map_file);
  lua_setfield(L, -2, "map_file");
  lua_pop(L, 1);
}

}  // namespace tc::lua
