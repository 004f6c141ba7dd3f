#include "data_pipeline/formats/text_reader.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace foldcore::data {
namespace {

constexpr size_t kChunk = 1 << 16;
// A single line longer than this is not text we parse; stop before exhausting memory.
constexpr size_t kMaxLineBytes = size_t{1} << 30;

std::string errno_text() { return std::strerror(errno); }

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

FilePtr open_or_throw(const std::string& path, const char* mode) {
  FilePtr f(std::fopen(path.c_str(), mode));
  if (!f) throw_parse_error(path, 0, "cannot open: " + errno_text());
  return f;
}

}  // namespace

void throw_parse_error(const std::string& file, int64_t line, const std::string& reason) {
  if (line > 0) FC_THROW(file, ":", line, ": ", reason);
  FC_THROW(file, ": ", reason);
}

bool is_gzip_file(const std::string& path) {
  FilePtr f = open_or_throw(path, "rb");
  unsigned char magic[2] = {0, 0};
  const size_t n = std::fread(magic, 1, 2, f.get());
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  FilePtr f = open_or_throw(path, "rb");
  std::vector<uint8_t> out;
  uint8_t buf[kChunk];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, f.get());
    out.insert(out.end(), buf, buf + n);
    if (n < sizeof buf) {
      if (std::ferror(f.get())) throw_parse_error(path, 0, "read error: " + errno_text());
      break;
    }
  }
  return out;
}

std::string read_text_file(const std::string& path) {
  LineReader r(path);
  std::string out, line;
  while (r.next(line)) {
    out += line;
    out += '\n';
  }
  return out;
}

void write_file_atomic(const std::string& path, std::string_view content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    FilePtr f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw_parse_error(tmp, 0, "cannot create: " + errno_text());
    const bool ok = std::fwrite(content.data(), 1, content.size(), f.get()) == content.size() &&
                    std::fflush(f.get()) == 0;
    if (!ok) {
      const std::string why = errno_text();
      f.reset();
      std::remove(tmp.c_str());
      throw_parse_error(tmp, 0, "write failed: " + why);
    }
    if (std::fclose(f.release()) != 0) {
      std::remove(tmp.c_str());
      throw_parse_error(tmp, 0, "close failed: " + errno_text());
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    std::remove(tmp.c_str());
    throw_parse_error(path, 0, "cannot rename " + tmp + " into place: " + why);
  }
}

// ---------------------------------------------------------------- LineReader

struct LineReader::Source {
  FilePtr file;
  gzFile gz = nullptr;
  std::string memory;
  size_t memory_pos = 0;
  bool is_memory = false;
  ~Source() {
    if (gz) gzclose(gz);
  }
  // Appends up to kChunk bytes to `out`; returns the count (0 at end). Throws on I/O errors.
  size_t read(std::string& out, const std::string& name) {
    if (is_memory) {
      const size_t n = std::min(kChunk, memory.size() - memory_pos);
      out.append(memory, memory_pos, n);
      memory_pos += n;
      return n;
    }
    char buf[kChunk];
    if (gz) {
      const int n = gzread(gz, buf, static_cast<unsigned>(sizeof buf));
      int code = Z_OK;
      const char* msg = gzerror(gz, &code);
      // A truncated stream reports Z_BUF_ERROR ("unexpected end of file") once input runs out.
      if (n < 0 || (code != Z_OK && code != Z_STREAM_END))
        throw_parse_error(name, 0, std::string("corrupt or truncated gzip data: ") + (msg ? msg : "?"));
      out.append(buf, static_cast<size_t>(n));
      return static_cast<size_t>(n);
    }
    const size_t n = std::fread(buf, 1, sizeof buf, file.get());
    if (n < sizeof buf && std::ferror(file.get())) throw_parse_error(name, 0, "read error: " + errno_text());
    out.append(buf, n);
    return n;
  }
};

LineReader::LineReader(const std::string& path) : src_(std::make_unique<Source>()), name_(path) {
  gzip_ = is_gzip_file(path);
  if (gzip_) {
    src_->gz = gzopen(path.c_str(), "rb");
    if (!src_->gz) throw_parse_error(path, 0, "cannot open gzip file: " + errno_text());
    gzbuffer(src_->gz, 1 << 17);
  } else {
    src_->file = open_or_throw(path, "rb");
  }
}

LineReader LineReader::from_string(std::string text, std::string name) {
  LineReader r;
  r.src_ = std::make_unique<Source>();
  r.src_->is_memory = true;
  r.src_->memory = std::move(text);
  r.name_ = std::move(name);
  return r;
}

LineReader::LineReader(LineReader&&) noexcept = default;
LineReader& LineReader::operator=(LineReader&&) noexcept = default;
LineReader::~LineReader() = default;

bool LineReader::fill() {
  if (eof_) return false;
  // Drop consumed bytes so the buffer holds at most one partial line plus a chunk.
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  if (buf_.size() > kMaxLineBytes) throw_parse_error(name_, line_ + 1, "line longer than 1 GiB");
  if (src_->read(buf_, name_) == 0) eof_ = true;
  return !eof_;
}

bool LineReader::next(std::string& line) {
  size_t scan = pos_;
  for (;;) {
    const size_t nl = buf_.find('\n', scan);
    if (nl != std::string::npos) {
      size_t end = nl;
      if (end > pos_ && buf_[end - 1] == '\r') --end;
      line.assign(buf_, pos_, end - pos_);
      pos_ = nl + 1;
      ++line_;
      return true;
    }
    // Bytes after pos_ were scanned already; fill() moves them to the front of the buffer.
    const size_t scanned = buf_.size() - pos_;
    if (!fill()) break;
    scan = pos_ + scanned;
  }
  if (pos_ >= buf_.size()) return false;
  // Last line without a trailing newline.
  size_t end = buf_.size();
  if (buf_[end - 1] == '\r') --end;
  line.assign(buf_, pos_, end - pos_);
  pos_ = buf_.size();
  ++line_;
  return true;
}

}  // namespace foldcore::data
