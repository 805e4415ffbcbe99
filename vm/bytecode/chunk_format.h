// Constants of the Lua 5.4 binary chunk header, shared by the reader and the writer.
#pragma once

#include <cstdint>

namespace tc::vm::chunk {

inline constexpr char kSignature[] = "\x1bLua";
inline constexpr uint8_t kVersion = 0x54;
inline constexpr uint8_t kFormat = 0;
inline constexpr char kData[] = "\x19\x93\r\n\x1a\n";  // LUAC_DATA, 6 bytes
inline constexpr uint8_t kInstructionSize = 4, kIntegerSize = 8, kNumberSize = 8;
inline constexpr int64_t kCheckInt = 0x5678;
inline constexpr double kCheckNum = 370.5;
inline constexpr int kMaxNesting = 200;  // deepest proto nesting the reader accepts

}  // namespace tc::vm::chunk
