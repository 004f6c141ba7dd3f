// .npz = zip archive of .npy entries. Reader: end-of-central-directory (with zip64 locator and
// record), central directory (with zip64 extra fields), local headers, stored or raw-deflate data,
// CRC-32. Writer: streams entries to a temporary file, then renames it into place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "data_pipeline/formats/npy.h"
#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEocdLen = 22;
constexpr size_t kCentralLen = 46;
constexpr size_t kLocalLen = 30;
constexpr uint32_t k32 = 0xffffffffu;
// Deflate cannot expand data by more than ~1032:1; a larger claimed ratio is a corrupt header.
constexpr uint64_t kMaxDeflateRatio = 1032;

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t rd32(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24; }
uint64_t rd64(const uint8_t* p) { return uint64_t{rd32(p)} | uint64_t{rd32(p + 4)} << 32; }

void put16(std::vector<uint8_t>& v, uint64_t x) {
  v.push_back(static_cast<uint8_t>(x));
  v.push_back(static_cast<uint8_t>(x >> 8));
}
void put32(std::vector<uint8_t>& v, uint64_t x) {
  put16(v, x & 0xffff);
  put16(v, (x >> 16) & 0xffff);
}
void put64(std::vector<uint8_t>& v, uint64_t x) {
  put32(v, x & k32);
  put32(v, x >> 32);
}

uint32_t crc32_of(const uint8_t* p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib's length argument is 32-bit
    const uInt step = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, p, step);
    p += step;
    n -= step;
  }
  return static_cast<uint32_t>(c);
}

std::string array_name(const std::string& entry) {
  return entry.size() > 4 && entry.compare(entry.size() - 4, 4, ".npy") == 0 ? entry.substr(0, entry.size() - 4) : entry;
}

}  // namespace

struct NpzReader::File {
  int fd = -1;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
  // Reads exactly n bytes at `offset` (callers have checked the range against the file size).
  void read_at(uint64_t offset, void* dst, size_t n, const std::string& what) const {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw_parse_error(what, 0, r == 0 ? "unexpected end of file" : std::string("read error: ") + std::strerror(errno));
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }
};

NpzReader::NpzReader(const std::string& path) : path_(path), file_(std::make_unique<File>()) {
  file_->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file_->fd < 0) throw_parse_error(path, 0, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(file_->fd, &st) != 0) throw_parse_error(path, 0, "cannot stat");
  file_size_ = static_cast<uint64_t>(st.st_size);
  if (file_size_ < kEocdLen) throw_parse_error(path, 0, "not a zip/.npz archive (" + std::to_string(file_size_) + " bytes)");

  // The end-of-central-directory record sits in the last 22 + (up to 65535 comment) bytes.
  const size_t tail_len = static_cast<size_t>(std::min<uint64_t>(file_size_, kEocdLen + 65535));
  std::vector<uint8_t> tail(tail_len);
  file_->read_at(file_size_ - tail_len, tail.data(), tail_len, path);
  size_t eocd = std::string::npos;
  for (size_t i = tail_len - kEocdLen + 1; i-- > 0;) {
    if (rd32(&tail[i]) == kEocdSig && i + kEocdLen + rd16(&tail[i + 20]) <= tail_len) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) {
    const bool npy = tail_len >= 6 && std::memcmp(tail.data(), "\x93NUMPY", 6) == 0 && file_size_ == tail_len;
    throw_parse_error(path, 0, npy ? "this is a .npy file, not an .npz archive"
                                   : "not a zip/.npz archive or truncated (no end-of-central-directory record)");
  }
  const uint8_t* e = &tail[eocd];
  uint64_t count = rd16(e + 10), cd_size = rd32(e + 12), cd_offset = rd32(e + 16);
  const uint64_t eocd_pos = file_size_ - tail_len + eocd;
  uint8_t loc[20] = {};
  if (eocd_pos >= 20) file_->read_at(eocd_pos - 20, loc, 20, path);
  if (rd32(loc) != kZip64LocatorSig && (cd_size == k32 || cd_offset == k32))
    throw_parse_error(path, 0, "zip64 archive without a zip64 locator");
  if (rd32(loc) == kZip64LocatorSig) {
    const uint64_t rec = rd64(loc + 8);
    if (rec > file_size_ || file_size_ - rec < 56) throw_parse_error(path, 0, "zip64 end record offset out of range");
    uint8_t z[56];
    file_->read_at(rec, z, 56, path);
    if (rd32(z) != kZip64EocdSig) throw_parse_error(path, 0, "bad zip64 end-of-central-directory signature");
    count = rd64(z + 32);
    cd_size = rd64(z + 40);
    cd_offset = rd64(z + 48);
  }
  if (cd_offset > file_size_ || cd_size > file_size_ - cd_offset)
    throw_parse_error(path, 0, "central directory out of range (truncated archive?)");
  if (count > cd_size / kCentralLen) throw_parse_error(path, 0, "central directory too small for " + std::to_string(count) + " entries");
  std::vector<uint8_t> cd(static_cast<size_t>(cd_size));
  file_->read_at(cd_offset, cd.data(), cd.size(), path);

  size_t p = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd.size() - p < kCentralLen || rd32(&cd[p]) != kCentralSig)
      throw_parse_error(path, 0, "bad central directory entry " + std::to_string(i));
    const uint8_t* c = &cd[p];
    Entry en;
    en.flags = rd16(c + 8);
    en.method = rd16(c + 10);
    en.crc = rd32(c + 16);
    en.compressed_size = rd32(c + 20);
    en.uncompressed_size = rd32(c + 24);
    const size_t name_len = rd16(c + 28), extra_len = rd16(c + 30), comment_len = rd16(c + 32);
    en.local_header_offset = rd32(c + 42);
    if (cd.size() - p - kCentralLen < name_len + extra_len + comment_len)
      throw_parse_error(path, 0, "central directory entry " + std::to_string(i) + " overruns the directory");
    en.name.assign(reinterpret_cast<const char*>(c + kCentralLen), name_len);
    // Zip64 extra field: 64-bit values for exactly the fields stored as 0xffffffff, in order.
    const uint8_t* x = c + kCentralLen + name_len;
    for (size_t q = 0; q + 4 <= extra_len;) {
      const uint16_t id = rd16(x + q), len = rd16(x + q + 2);
      if (q + 4 + len > extra_len) throw_parse_error(path, 0, "entry '" + en.name + "': malformed extra field");
      if (id == 0x0001) {
        const uint8_t* f = x + q + 4;
        size_t left = len;
        auto take = [&](uint64_t& v) {
          if (v != k32) return;
          if (left < 8) throw_parse_error(path, 0, "entry '" + en.name + "': short zip64 extra field");
          v = rd64(f);
          f += 8;
          left -= 8;
        };
        take(en.uncompressed_size);
        take(en.compressed_size);
        take(en.local_header_offset);
      }
      q += 4 + len;
    }
    p += kCentralLen + name_len + extra_len + comment_len;
    const std::string name = array_name(en.name);
    if (index_.count(name)) throw_parse_error(path, 0, "duplicate entry '" + en.name + "'");
    index_[name] = entries_.size();
    names_.push_back(name);
    entries_.push_back(std::move(en));
  }
}

NpzReader::~NpzReader() = default;

bool NpzReader::contains(const std::string& name) const { return index_.count(name) > 0; }

const NpzReader::Entry& NpzReader::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw_parse_error(path_, 0, "no array named '" + name + "' in the archive");
  return entries_[it->second];
}

std::vector<uint8_t> NpzReader::read_entry_bytes(const std::string& name) const {
  const Entry& en = entry(name);
  const std::string what = path_ + ":" + en.name;
  if (en.flags & 1u) throw_parse_error(what, 0, "encrypted zip entries are not supported");
  if (en.local_header_offset > file_size_ || file_size_ - en.local_header_offset < kLocalLen)
    throw_parse_error(what, 0, "local header out of range (truncated archive?)");
  uint8_t lh[kLocalLen];
  file_->read_at(en.local_header_offset, lh, kLocalLen, what);
  if (rd32(lh) != kLocalSig) throw_parse_error(what, 0, "bad local header signature");
  const uint64_t data_off = en.local_header_offset + kLocalLen + rd16(lh + 26) + rd16(lh + 28);
  if (data_off > file_size_ || en.compressed_size > file_size_ - data_off)
    throw_parse_error(what, 0, "entry data runs past the end of the file (truncated archive?)");

  std::vector<uint8_t> out;
  if (en.method == 0) {
    if (en.compressed_size != en.uncompressed_size) throw_parse_error(what, 0, "stored entry with differing sizes");
    out.resize(static_cast<size_t>(en.uncompressed_size));
    file_->read_at(data_off, out.data(), out.size(), what);
  } else if (en.method == 8) {
    if (en.uncompressed_size > en.compressed_size * kMaxDeflateRatio + 1024)
      throw_parse_error(what, 0, "implausible uncompressed size " + std::to_string(en.uncompressed_size) + " for " +
                                     std::to_string(en.compressed_size) + " compressed bytes");
    out.resize(static_cast<size_t>(en.uncompressed_size));
    z_stream zs{};
    if (inflateInit2(&zs, -15) != Z_OK) throw_parse_error(what, 0, "inflateInit2 failed");
    struct Guard {
      z_stream* z;
      ~Guard() { inflateEnd(z); }
    } guard{&zs};
    std::vector<uint8_t> in(std::min<uint64_t>(en.compressed_size, 1u << 20) + 1);
    uint64_t consumed = 0;
    size_t produced = 0;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (zs.avail_in == 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(in.size() - 1, en.compressed_size - consumed));
        if (n == 0) throw_parse_error(what, 0, "deflate stream ends early (truncated or corrupt entry)");
        file_->read_at(data_off + consumed, in.data(), n, what);
        consumed += n;
        zs.next_in = in.data();
        zs.avail_in = static_cast<uInt>(n);
      }
      const size_t room = std::min<size_t>(out.size() - produced, 1u << 30);
      uint8_t dummy = 0;
      zs.next_out = room ? out.data() + produced : &dummy;
      zs.avail_out = room ? static_cast<uInt>(room) : 1u;
      rc = inflate(&zs, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END)
        throw_parse_error(what, 0, std::string("corrupt deflate data: ") + (zs.msg ? zs.msg : std::to_string(rc)));
      produced += (room ? room : 1u) - zs.avail_out;
      if (produced > out.size()) throw_parse_error(what, 0, "entry inflates beyond its recorded size");
    }
    if (produced != out.size())
      throw_parse_error(what, 0, "entry inflates to " + std::to_string(produced) + " bytes, recorded size " +
                                     std::to_string(out.size()));
  } else {
    throw_parse_error(what, 0, "unsupported zip compression method " + std::to_string(en.method));
  }
  const uint32_t crc = crc32_of(out.data(), out.size());
  if (crc != en.crc) throw_parse_error(what, 0, "CRC-32 mismatch (corrupt archive)");
  return out;
}

NpyArray NpzReader::read(const std::string& name) const {
  const std::vector<uint8_t> bytes = read_entry_bytes(name);
  return parse_npy(bytes.data(), bytes.size(), path_ + ":" + entry(name).name);
}

std::map<std::string, NpyArray> read_npz(const std::string& path) {
  NpzReader r(path);
  std::map<std::string, NpyArray> out;
  for (const std::string& n : r.names()) out.emplace(n, r.read(n));
  return out;
}

// ---------------------------------------------------------------- writer

namespace {

struct WrittenEntry {
  std::string name;
  uint16_t method;
  uint32_t crc;
  uint64_t csize, usize, offset;
};

class ZipOut {
 public:
  explicit ZipOut(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) throw_parse_error(path, 0, std::string("cannot create: ") + std::strerror(errno));
  }
  ~ZipOut() {
    if (f_) std::fclose(f_);
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) throw_parse_error(path_, 0, std::string("write failed: ") + std::strerror(errno));
    pos_ += n;
  }
  void write(const std::vector<uint8_t>& v) { write(v.data(), v.size()); }
  void close() {
    const bool ok = std::fflush(f_) == 0 && std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok) throw_parse_error(path_, 0, std::string("close failed: ") + std::strerror(errno));
  }
  uint64_t pos() const { return pos_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t pos_ = 0;
};

std::vector<uint8_t> deflate_raw(const std::vector<uint8_t>& in, const std::string& what) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw_parse_error(what, 0, "deflateInit2 failed");
  std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(in.size())) + 64);
  size_t in_pos = 0, out_pos = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    const size_t in_step = std::min<size_t>(in.size() - in_pos, 1u << 30);
    zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
    zs.avail_in = static_cast<uInt>(in_step);
    if (out.size() - out_pos < 1024) out.resize(out.size() * 2);
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - out_pos, 1u << 30));
    const uInt avail_out0 = zs.avail_out;
    const bool last = in_pos + in_step == in.size();
    rc = deflate(&zs, last ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_ERROR) {
      deflateEnd(&zs);
      throw_parse_error(what, 0, "deflate failed");
    }
    in_pos += in_step - zs.avail_in;
    out_pos += avail_out0 - zs.avail_out;
  }
  deflateEnd(&zs);
  out.resize(out_pos);
  return out;
}

}  // namespace

void write_npz(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& arrays, bool compress) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    ZipOut z(tmp);
    std::vector<WrittenEntry> written;
    for (const auto& [name, array] : arrays) {
      FC_CHECK(!name.empty() && name.size() < 60000, "write_npz: bad array name '", name, "'");
      for (const auto& w : written)
        FC_CHECK(w.name != name + ".npy", "write_npz: duplicate array name '", name, "'");
      const std::vector<uint8_t> raw = serialize_npy(array);
      WrittenEntry w{name + ".npy", static_cast<uint16_t>(compress ? 8 : 0), crc32_of(raw.data(), raw.size()), 0,
                     raw.size(), z.pos()};
      const std::vector<uint8_t> packed = compress ? deflate_raw(raw, path + ":" + w.name) : std::vector<uint8_t>{};
      const std::vector<uint8_t>& data = compress ? packed : raw;
      w.csize = data.size();
      // Local header; sizes over 4 GiB go into a zip64 extra field (usize, csize).
      const bool z64 = w.usize >= k32 || w.csize >= k32;
      std::vector<uint8_t> h;
      put32(h, kLocalSig);
      put16(h, z64 ? 45 : 20);
      put16(h, 0);
      put16(h, w.method);
      put16(h, 0);       // time 00:00
      put16(h, 0x21);    // date 1980-01-01
      put32(h, w.crc);
      put32(h, z64 ? k32 : w.csize);
      put32(h, z64 ? k32 : w.usize);
      put16(h, w.name.size());
      put16(h, z64 ? 20 : 0);
      h.insert(h.end(), w.name.begin(), w.name.end());
      if (z64) {
        put16(h, 1);
        put16(h, 16);
        put64(h, w.usize);
        put64(h, w.csize);
      }
      z.write(h);
      z.write(data);
      written.push_back(std::move(w));
    }
    const uint64_t cd_offset = z.pos();
    for (const auto& w : written) {
      std::vector<uint8_t> extra;
      if (w.usize >= k32) put64(extra, w.usize);
      if (w.csize >= k32) put64(extra, w.csize);
      if (w.offset >= k32) put64(extra, w.offset);
      std::vector<uint8_t> c;
      put32(c, kCentralSig);
      put16(c, extra.empty() ? 20 : 45);  // made by
      put16(c, extra.empty() ? 20 : 45);  // needed
      put16(c, 0);
      put16(c, w.method);
      put16(c, 0);
      put16(c, 0x21);
      put32(c, w.crc);
      put32(c, w.csize >= k32 ? k32 : w.csize);
      put32(c, w.usize >= k32 ? k32 : w.usize);
      put16(c, w.name.size());
      put16(c, extra.empty() ? 0 : extra.size() + 4);
      put16(c, 0);  // comment
      put16(c, 0);  // disk
      put16(c, 0);  // internal attributes
      put32(c, 0);  // external attributes
      put32(c, w.offset >= k32 ? k32 : w.offset);
      c.insert(c.end(), w.name.begin(), w.name.end());
      if (!extra.empty()) {
        put16(c, 1);
        put16(c, extra.size());
        c.insert(c.end(), extra.begin(), extra.end());
      }
      z.write(c);
    }
    const uint64_t cd_size = z.pos() - cd_offset;
    const uint64_t n = written.size();
    std::vector<uint8_t> e;
    if (n >= 0xffff || cd_size >= k32 || cd_offset >= k32) {
      const uint64_t rec = z.pos();
      put32(e, kZip64EocdSig);
      put64(e, 44);  // size of the rest of the record
      put16(e, 45);
      put16(e, 45);
      put32(e, 0);
      put32(e, 0);
      put64(e, n);
      put64(e, n);
      put64(e, cd_size);
      put64(e, cd_offset);
      put32(e, kZip64LocatorSig);
      put32(e, 0);
      put64(e, rec);
      put32(e, 1);
    }
    put32(e, kEocdSig);
    put16(e, 0);
    put16(e, 0);
    put16(e, std::min<uint64_t>(n, 0xffff));
    put16(e, std::min<uint64_t>(n, 0xffff));
    put32(e, std::min<uint64_t>(cd_size, k32));
    put32(e, std::min<uint64_t>(cd_offset, k32));
    put16(e, 0);
    z.write(e);
    z.close();
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw_parse_error(path, 0, "cannot rename " + tmp + " into place: " + why);
  }
}

}  // namespace foldcore::data
