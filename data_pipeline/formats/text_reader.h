// Text and byte input for the parsers: a streaming line reader over plain or gzip files (gzip is
// detected from the magic bytes 1f 8b, not from the extension), whole-file reads, and atomic
// whole-file writes. Every error is a foldcore::Error "<file>:<line>: <reason>" (or
// "<file>: <reason>" where no line applies).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace foldcore::data {

// Throws foldcore::Error("<file>:<line>: <reason>"); line <= 0 omits the line.
[[noreturn]] void throw_parse_error(const std::string& file, int64_t line, const std::string& reason);

// True when the file starts with the gzip magic bytes. Throws if it cannot be opened.
bool is_gzip_file(const std::string& path);

// The raw bytes of a file (no decompression): for binary formats (.npy, .npz).
std::vector<uint8_t> read_file_bytes(const std::string& path);

// The whole (decompressed when gzip) content of a file as text.
std::string read_text_file(const std::string& path);

// Writes `content` to `path` through a temporary file in the same folder and a rename, so a
// failure never leaves a partial file at `path`.
void write_file_atomic(const std::string& path, std::string_view content);

// A line-by-line reader. Lines are returned without the trailing "\n" or "\r\n". The reader
// keeps the file name and the number of the line last returned, for error messages.
class LineReader {
 public:
  // Opens a plain or gzip file.
  explicit LineReader(const std::string& path);
  // Reads from memory; `name` stands for the file name in messages.
  static LineReader from_string(std::string text, std::string name);

  LineReader(LineReader&&) noexcept;
  LineReader& operator=(LineReader&&) noexcept;
  ~LineReader();

  // Next line into `line` (valid until the next call); false at end of input.
  bool next(std::string& line);

  const std::string& name() const { return name_; }
  int64_t line_number() const { return line_; }
  bool gzip() const { return gzip_; }

  // Throws "<file>:<current line>: <reason>".
  [[noreturn]] void fail(const std::string& reason) const { throw_parse_error(name_, line_, reason); }

 private:
  struct Source;  // plain FILE*, gzFile or memory
  LineReader() = default;
  bool fill();  // refills buf_; false at end of input

  std::unique_ptr<Source> src_;
  std::string name_;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
  bool gzip_ = false;
  int64_t line_ = 0;
};

}  // namespace foldcore::data
