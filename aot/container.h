// The package file container (docs/aot.md): a fixed header, a section table with one xxh3
// checksum per section, the sections 64-byte aligned. Written atomically (temporary file renamed
// into place); read fully validated (magic, format version, declared file size, header and
// section checksums) before anything in it is used.
#pragma once
#include <string>
#include <vector>

namespace tc::aot {

struct Section {
  std::string name;  // at most 39 bytes: "manifest", "plan", "cpu.o", "constants"
  std::string data;
};

// Throws tc::Error (ValueError) when the file cannot be written; never leaves a partial file at
// `path`.
void write_container(const std::string& path, const std::vector<Section>& sections);
// Throws tc::Error (ValueError) naming `path` and what is wrong: not a package, another format
// version, truncated, corrupted (which section).
std::vector<Section> read_container(const std::string& path);
const Section* find_section(const std::vector<Section>& s, const std::string& name);

}  // namespace tc::aot
