// LineReader over plain, gzip and in-memory input; whole-file reads; atomic writes; error format.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data_pipeline/formats/text_reader.h"
#include "data_pipeline/data_test_util.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("fc_text_reader_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_plain(const std::string& path, const std::string& s) {
  std::ofstream(path, std::ios::binary) << s;
}

void write_gzip(const std::string& path, const std::string& s) {
  gzFile g = gzopen(path.c_str(), "wb");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(gzwrite(g, s.data(), static_cast<unsigned>(s.size())), static_cast<int>(s.size()));
  gzclose(g);
}

std::vector<std::string> all_lines(LineReader& r) {
  std::vector<std::string> out;
  std::string line;
  while (r.next(line)) out.push_back(line);
  return out;
}

TEST(TextReader, LinesFromMemoryWithCrlfAndNoTrailingNewline) {
  LineReader r = LineReader::from_string("a\r\nbb\n\nccc", "mem");
  EXPECT_EQ(all_lines(r), (std::vector<std::string>{"a", "bb", "", "ccc"}));
  EXPECT_EQ(r.line_number(), 4);
  LineReader empty = LineReader::from_string("", "mem");
  EXPECT_TRUE(all_lines(empty).empty());
}

TEST(TextReader, LongLinesAcrossChunkBoundaries) {
  // Lines longer than the 64 KiB read chunk, and many short lines, must come back intact.
  std::string text;
  std::vector<std::string> expect;
  for (int i = 0; i < 7; ++i) {
    expect.push_back(std::string(70000 + i * 13, static_cast<char>('a' + i)));
    for (int k = 0; k < 1000; ++k) expect.push_back(std::to_string(k));
  }
  for (const auto& l : expect) text += l + "\n";
  TempDir dir;
  write_plain(dir.file("long.txt"), text);
  write_gzip(dir.file("long.txt.gz"), text);
  LineReader plain(dir.file("long.txt"));
  EXPECT_FALSE(plain.gzip());
  EXPECT_EQ(all_lines(plain), expect);
  LineReader gz(dir.file("long.txt.gz"));
  EXPECT_TRUE(gz.gzip());
  EXPECT_EQ(all_lines(gz), expect);
  EXPECT_EQ(read_text_file(dir.file("long.txt.gz")), text);
}

TEST(TextReader, GzipDetectedByMagicNotExtension) {
  TempDir dir;
  write_gzip(dir.file("looks_plain.txt"), "x\ny\n");
  write_plain(dir.file("looks_gz.gz"), "p\nq\n");
  EXPECT_TRUE(is_gzip_file(dir.file("looks_plain.txt")));
  EXPECT_FALSE(is_gzip_file(dir.file("looks_gz.gz")));
  LineReader a(dir.file("looks_plain.txt"));
  EXPECT_EQ(all_lines(a), (std::vector<std::string>{"x", "y"}));
  LineReader b(dir.file("looks_gz.gz"));
  EXPECT_EQ(all_lines(b), (std::vector<std::string>{"p", "q"}));
}

TEST(TextReader, TruncatedGzipIsAnError) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i * 7919 % 10007) + "\n";
  write_gzip(dir.file("full.gz"), text);
  const auto bytes = read_file_bytes(dir.file("full.gz"));
  ASSERT_GT(bytes.size(), 100u);
  const std::string cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2));
  write_plain(dir.file("cut.gz"), cut);
  const std::string msg = error_of([&] { read_text_file(dir.file("cut.gz")); });
  EXPECT_NE(msg.find("cut.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gzip"), std::string::npos) << msg;
}

TEST(TextReader, ErrorsNameFileAndLine) {
  LineReader r = LineReader::from_string("one\ntwo\n", "input.txt");
  std::string line;
  r.next(line);
  r.next(line);
  const std::string msg = error_of([&] { r.fail("bad thing"); });
  EXPECT_EQ(msg, "input.txt:2: bad thing");
  EXPECT_EQ(error_of([] { throw_parse_error("f.bin", 0, "why"); }), "f.bin: why");
  const std::string missing = error_of([] { LineReader x("/nonexistent/dir/file.txt"); });
  EXPECT_NE(missing.find("/nonexistent/dir/file.txt: cannot open"), std::string::npos) << missing;
  EXPECT_NE(error_of([] { read_file_bytes("/nonexistent/x"); }).find("cannot open"), std::string::npos);
}

TEST(TextReader, AtomicWriteReplacesAndLeavesNoTemp) {
  TempDir dir;
  const std::string p = dir.file("out.txt");
  write_file_atomic(p, "first");
  write_file_atomic(p, "second\n");
  const auto bytes = read_file_bytes(p);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "second\n");
  int files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(p).parent_path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_NE(error_of([&] { write_file_atomic(dir.file("no/such/dir/x"), "y"); }).find("cannot create"),
            std::string::npos);
}

TEST(TextReader, RealFileLineCount) {
  const std::string path = testing::shared_dir() + "/data/query73/query.fasta";
  LineReader r(path);
  const auto lines = all_lines(r);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], ">query");
  EXPECT_EQ(lines[1].size(), 73u);
}

}  // namespace
}  // namespace foldcore::data
