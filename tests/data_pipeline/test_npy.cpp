// .npy / .npz reading and writing: real AlphaFold files, all dtypes, Fortran order, byte order,
// header versions, zip64 records, stored and deflated round trips, and bad inputs.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "data_pipeline/formats/npy.h"
#include "data_pipeline/formats/text_reader.h"
#include "data_pipeline/data_test_util.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("fc_npy_" + std::to_string(::getpid()))) { fs::create_directories(path_); }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& n) const { return (path_ / n).string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// A hand-written .npy image: magic, version, header dict (padded to 64), raw data.
std::vector<uint8_t> make_npy(const std::string& dict, const std::vector<uint8_t>& data, int major = 1) {
  std::string h = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  out.push_back(static_cast<uint8_t>(h.size() & 0xff));
  out.push_back(static_cast<uint8_t>(h.size() >> 8));
  if (major != 1) out.insert(out.end(), {0, 0});
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <typename T> std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(Npz, AlphaFoldRawFeatures) {
  NpzReader r(testing::shared_dir() + "/data/query73/af2_raw_features.npz");
  EXPECT_EQ(r.names().size(), 15u);
  const auto all = read_npz(r.path());
  struct Want {
    const char* name;
    const char* descr;
    std::vector<int64_t> shape;
  };
  const std::vector<Want> want = {
      {"aatype", "<i4", {73, 21}}, {"between_segment_residues", "<i4", {73}}, {"domain_name", "|S5", {1}},
      {"residue_index", "<i4", {73}}, {"seq_length", "<i4", {73}}, {"sequence", "|S73", {1}},
      {"msa", "<i4", {1136, 73}}, {"deletion_matrix_int", "<i4", {1136, 73}}, {"num_alignments", "<i4", {73}},
      {"template_aatype", "<f4", {8, 73, 22}}, {"template_all_atom_masks", "<f4", {8, 73, 37}},
      {"template_all_atom_positions", "<f4", {8, 73, 37, 3}}, {"template_domain_names", "|S6", {8}},
      {"template_sequence", "|S73", {8}}, {"template_sum_probs", "<f4", {8, 1}}};
  for (const Want& w : want) {
    ASSERT_TRUE(all.count(w.name)) << w.name;
    EXPECT_EQ(all.at(w.name).dtype.descr(), w.descr) << w.name;
    EXPECT_EQ(all.at(w.name).shape, w.shape) << w.name;
  }
  EXPECT_EQ(all.at("sequence").strings()[0], "MAAHKGAEHHHKAAEHHEQAAKHHHAAAEHHEKGEHEQAAHHADTAYAHHKHAEEHAAQAAKHDAEHHAPKPH");
  EXPECT_EQ(all.at("domain_name").strings()[0], "query");
  EXPECT_EQ(all.at("template_domain_names").strings()[0].size(), 6u);
  // aatype is one-hot over 21 types: each row sums to 1; M (index 12 in AlphaFold order) first.
  const Tensor aatype = all.at("aatype").to_tensor();
  EXPECT_EQ(aatype.dtype(), DType::i32);
  const auto v = aatype.to_vector_i64();
  for (int i = 0; i < 73; ++i) {
    int64_t s = 0;
    for (int k = 0; k < 21; ++k) s += v[static_cast<size_t>(i * 21 + k)];
    ASSERT_EQ(s, 1);
  }
  EXPECT_EQ(v[12], 1);
  const auto res = all.at("residue_index").as<int32_t>();
  EXPECT_EQ(res[0], 0);
  EXPECT_EQ(res[72], 72);
  const Tensor pos = all.at("template_all_atom_positions").to_tensor();
  EXPECT_EQ(pos.dtype(), DType::f32);
  EXPECT_EQ(pos.shape(), Shape({8, 73, 37, 3}));
  EXPECT_NE(error_of([&] { all.at("sequence").to_tensor(); }).find("bytes arrays"), std::string::npos);
  EXPECT_NE(error_of([&] { r.read("nope"); }).find("no array named 'nope'"), std::string::npos);
}

TEST(Npz, AlphaFoldParamsAndFeatures) {
  const std::string ref = testing::shared_dir() + "/af2/ref/";
  NpzReader p(ref + "params.npz");
  ASSERT_EQ(p.names().size(), 338u);
  EXPECT_EQ(p.names()[0], "alphafold/alphafold_iteration/evoformer/preprocess_1d//weights");
  int64_t scalars = 0;
  for (const std::string& n : p.names()) {
    const NpyArray a = p.read(n);
    ASSERT_EQ(a.dtype, NpyDType::f32()) << n;
    scalars += a.numel();
  }
  EXPECT_EQ(scalars, 6955610);  // params.json n_scalars
  const NpyArray w = p.read("alphafold/alphafold_iteration/evoformer/preprocess_1d//weights");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{22, 256}));

  const auto f = read_npz(ref + "features.npz");
  EXPECT_EQ(f.size(), 30u);
  EXPECT_EQ(f.at("aatype").dtype.descr(), "<i8");
  EXPECT_EQ(f.at("aatype").shape, (std::vector<int64_t>{40, 2}));
  EXPECT_EQ(f.at("msa_feat").shape, (std::vector<int64_t>{28, 40, 49, 2}));
  EXPECT_EQ(f.at("template_all_atom_positions").shape, (std::vector<int64_t>{4, 40, 37, 3, 2}));
  EXPECT_EQ(f.at("seq_length").as<int64_t>()[0], 40);
  EXPECT_EQ(f.at("aatype").to_tensor().dtype(), DType::i64);
}

TEST(Npy, DtypesAndTensorConversion) {
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> cases = {
      {"<f8", raw<double>({1.5, -2.25})}, {"<f2", raw<uint16_t>({0x3c00, 0xc000})},  // 1.0, -2.0
      {"|i1", raw<int8_t>({-3, 4})},       {"<i2", raw<int16_t>({-300, 7})},
      {"<i8", raw<int64_t>({-5, 1LL << 40})}, {"|u1", raw<uint8_t>({200, 1})},
      {"<u2", raw<uint16_t>({65535, 2})},  {"<u4", raw<uint32_t>({4000000000u, 3})},
      {"|b1", raw<uint8_t>({1, 0})},       {"bool", raw<uint8_t>({0, 1})}};
  const std::vector<std::vector<double>> expect = {{1.5, -2.25}, {1.0, -2.0}, {-3, 4}, {-300, 7}, {-5, double(1LL << 40)},
                                                   {200, 1},     {65535, 2},  {4e9, 3}, {1, 0},    {0, 1}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto img = make_npy("{'descr': '" + cases[i].first + "', 'fortran_order': False, 'shape': (2,), }", cases[i].second);
    const NpyArray a = parse_npy(img.data(), img.size(), "case");
    const Tensor t = a.to_tensor();
    const auto got = t.to(DType::f32).to_vector();
    ASSERT_EQ(got.size(), 2u) << cases[i].first;
    for (int k = 0; k < 2; ++k) EXPECT_DOUBLE_EQ(got[static_cast<size_t>(k)], static_cast<float>(expect[i][static_cast<size_t>(k)])) << cases[i].first;
    // Write -> read keeps dtype, shape and bytes.
    const auto again = serialize_npy(a);
    const NpyArray b = parse_npy(again.data(), again.size(), "again");
    EXPECT_EQ(b.dtype, a.dtype);
    EXPECT_EQ(b.data, a.data);
  }
  // Scalar (0-d) and empty arrays.
  const auto scalar = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", raw<float>({3.5f}));
  const NpyArray s = parse_npy(scalar.data(), scalar.size(), "s");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_FLOAT_EQ(s.to_tensor().item(), 3.5f);
  const auto empty = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", {});
  EXPECT_EQ(parse_npy(empty.data(), empty.size(), "e").numel(), 0);
  // Tensor -> npy: bf16 becomes f32.
  const Tensor bt = Tensor::from_vector({1.0f, 2.0f, 3.0f}, {3}, DType::bf16);
  const NpyArray ba = NpyArray::from_tensor(bt);
  EXPECT_EQ(ba.dtype, NpyDType::f32());
  EXPECT_EQ(ba.to_tensor().to_vector(), (std::vector<float>{1, 2, 3}));
}

TEST(Npy, FortranOrderBigEndianAndHeaderVersions) {
  // Fortran-order [2,3] holding C-order [[0,1,2],[3,4,5]] is stored column-major: 0,3,1,4,2,5.
  const auto f = make_npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", raw<int32_t>({0, 3, 1, 4, 2, 5}));
  const NpyArray a = parse_npy(f.data(), f.size(), "f");
  EXPECT_EQ(std::vector<int32_t>(a.as<int32_t>(), a.as<int32_t>() + 6), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  const auto f3 = make_npy("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 2, 2), }",
                           raw<int16_t>({0, 4, 2, 6, 1, 5, 3, 7}));
  const NpyArray a3 = parse_npy(f3.data(), f3.size(), "f3");
  EXPECT_EQ(std::vector<int16_t>(a3.as<int16_t>(), a3.as<int16_t>() + 8), (std::vector<int16_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  const auto be = make_npy("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", {0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe});
  const NpyArray b = parse_npy(be.data(), be.size(), "be");
  EXPECT_EQ(b.as<int32_t>()[0], 258);
  EXPECT_EQ(b.as<int32_t>()[1], -2);
  for (int major : {2, 3}) {
    const auto v = make_npy("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1, 2)}", raw<float>({1, 2}), major);
    EXPECT_EQ(parse_npy(v.data(), v.size(), "v").shape, (std::vector<int64_t>{1, 2}));
  }
  // Bytes arrays round trip; headers this small are written as version 1.0.
  NpyArray s = NpyArray::from_strings({"abc", "de"}, {2});
  const auto img = serialize_npy(s);
  EXPECT_EQ(img[6], 1);
  EXPECT_EQ(parse_npy(img.data(), img.size(), "s").strings(), (std::vector<std::string>{"abc", "de"}));
}

TEST(Npy, BadInputs) {
  const auto good = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", raw<float>({1, 2, 3, 4}));
  auto err = [](const std::vector<uint8_t>& b) { return error_of([&] { parse_npy(b.data(), b.size(), "x.npy"); }); };
  EXPECT_NE(err({}).find("x.npy: truncated .npy data (0 bytes)"), std::string::npos);
  auto bad_magic = good;
  bad_magic[1] = 'X';
  EXPECT_NE(err(bad_magic).find("bad magic"), std::string::npos);
  const std::vector<uint8_t> cut(good.begin(), good.end() - 3);
  EXPECT_NE(err(cut).find("truncated .npy data: shape (2,2) of <f4 needs 16 data bytes, found 13"), std::string::npos);
  auto extra = good;
  extra.push_back(0);
  EXPECT_NE(err(extra).find("size mismatch"), std::string::npos);
  auto absurd = good;
  absurd[6] = 2;  // version 2 reads a 4-byte length: make it huge
  absurd[10] = 0xff;
  absurd[11] = 0x7f;
  EXPECT_NE(err(absurd).find("absurd .npy header length"), std::string::npos);
  auto long_hdr = good;
  long_hdr[8] = 0xff;
  long_hdr[9] = 0xff;
  EXPECT_NE(err(long_hdr).find("header of 65535 bytes"), std::string::npos);
  auto ver = good;
  ver[6] = 9;
  EXPECT_NE(err(ver).find("unsupported .npy format version 9"), std::string::npos);
  EXPECT_NE(err(make_npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", {0, 0, 0, 0, 0, 0, 0, 0})).find("object arrays"),
            std::string::npos);
  EXPECT_NE(err(make_npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", raw<float>({1, 2}))).find("unsupported dtype descr '<c8'"),
            std::string::npos);
  EXPECT_NE(err(make_npy("{'descr': '<f4', 'shape': (1,), }", raw<float>({1}))).find("missing descr"), std::string::npos);
  EXPECT_NE(err(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", {})).find("bad .npy header"),
            std::string::npos);
  // A shape whose byte size overflows 64 bits never allocates.
  EXPECT_NE(err(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", {})).find("overflows"),
            std::string::npos);
  EXPECT_NE(err(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999,), }", {})).find("truncated"),
            std::string::npos);
  EXPECT_NE(err(make_npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", raw<float>({1}))).find("True or False"),
            std::string::npos);
}

TEST(Npz, RoundTripStoredAndDeflated) {
  TempDir dir;
  std::vector<float> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 97) * 0.5f;
  const std::vector<std::pair<std::string, NpyArray>> arrays = {
      {"a/b//weights", NpyArray::from_f32(big, {1000, 100})},
      {"ints", NpyArray::from_i32({1, -2, 3}, {3})},
      {"names", NpyArray::from_strings({"1abc_A", "2xyz_B"}, {2})},
      {"t", NpyArray::from_tensor(Tensor::from_vector_i64({7, 8}, {2, 1}, DType::i64))},
      {"empty", NpyArray::from_f32({}, {0})}};
  for (const bool compress : {false, true}) {
    const std::string p = dir.file(compress ? "d.npz" : "s.npz");
    write_npz(p, arrays, compress);
    NpzReader r(p);
    ASSERT_EQ(r.names().size(), arrays.size());
    for (size_t i = 0; i < arrays.size(); ++i) {
      EXPECT_EQ(r.names()[i], arrays[i].first);
      const NpyArray a = r.read(arrays[i].first);
      EXPECT_EQ(a.dtype, arrays[i].second.dtype);
      EXPECT_EQ(a.shape, arrays[i].second.shape);
      EXPECT_EQ(a.data, arrays[i].second.data);
    }
    if (compress) EXPECT_LT(fs::file_size(p), big.size() * 4 / 4);
    else EXPECT_GT(fs::file_size(p), big.size() * 4);
  }
  EXPECT_NE(error_of([&] { write_npz(dir.file("dup.npz"), {arrays[1], arrays[1]}); }).find("duplicate array name"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.file("dup.npz")));
  write_npy(dir.file("one.npy"), arrays[1].second);
  EXPECT_EQ(read_npy(dir.file("one.npy")).data, arrays[1].second.data);
}

// Builds a one-entry stored zip whose central directory uses zip64 extra fields and a zip64
// end record, as writers do for entries or archives over 4 GiB.
std::vector<uint8_t> zip64_archive(const std::vector<uint8_t>& npy) {
  auto p16 = [](std::vector<uint8_t>& v, uint64_t x) { v.push_back(x & 0xff), v.push_back((x >> 8) & 0xff); };
  auto p32 = [&](std::vector<uint8_t>& v, uint64_t x) { p16(v, x & 0xffff), p16(v, x >> 16); };
  auto p64 = [&](std::vector<uint8_t>& v, uint64_t x) { p32(v, x & 0xffffffff), p32(v, x >> 32); };
  const uint32_t crc = static_cast<uint32_t>(crc32(0, npy.data(), static_cast<uInt>(npy.size())));
  const std::string name = "x.npy";
  std::vector<uint8_t> z;
  p32(z, 0x04034b50), p16(z, 45), p16(z, 0), p16(z, 0), p16(z, 0), p16(z, 0), p32(z, crc);
  p32(z, 0xffffffff), p32(z, 0xffffffff), p16(z, name.size()), p16(z, 20);
  z.insert(z.end(), name.begin(), name.end());
  p16(z, 1), p16(z, 16), p64(z, npy.size()), p64(z, npy.size());
  z.insert(z.end(), npy.begin(), npy.end());
  const uint64_t cd = z.size();
  p32(z, 0x02014b50), p16(z, 45), p16(z, 45), p16(z, 0), p16(z, 0), p16(z, 0), p16(z, 0), p32(z, crc);
  p32(z, 0xffffffff), p32(z, 0xffffffff), p16(z, name.size()), p16(z, 28), p16(z, 0), p16(z, 0), p16(z, 0), p32(z, 0);
  p32(z, 0xffffffff);
  z.insert(z.end(), name.begin(), name.end());
  p16(z, 1), p16(z, 24), p64(z, npy.size()), p64(z, npy.size()), p64(z, 0);
  const uint64_t cd_size = z.size() - cd, rec = z.size();
  p32(z, 0x06064b50), p64(z, 44), p16(z, 45), p16(z, 45), p32(z, 0), p32(z, 0), p64(z, 1), p64(z, 1), p64(z, cd_size), p64(z, cd);
  p32(z, 0x07064b50), p32(z, 0), p64(z, rec), p32(z, 1);
  p32(z, 0x06054b50), p16(z, 0), p16(z, 0), p16(z, 0xffff), p16(z, 0xffff), p32(z, 0xffffffff), p32(z, 0xffffffff), p16(z, 0);
  return z;
}

TEST(Npz, Zip64Records) {
  TempDir dir;
  const NpyArray a = NpyArray::from_i32({4, 5, 6}, {3});
  write_bytes(dir.file("z64.npz"), zip64_archive(serialize_npy(a)));
  NpzReader r(dir.file("z64.npz"));
  ASSERT_EQ(r.names(), (std::vector<std::string>{"x"}));
  EXPECT_EQ(r.read("x").data, a.data);
}

TEST(Npz, BadArchives) {
  TempDir dir;
  const std::vector<std::pair<std::string, NpyArray>> arrays = {{"w", NpyArray::from_f32(std::vector<float>(5000, 1.25f), {50, 100})},
                                                                {"v", NpyArray::from_i32({1, 2}, {2})}};
  write_npz(dir.file("ok.npz"), arrays, true);
  write_npz(dir.file("st.npz"), arrays, false);
  const auto ok = read_file_bytes(dir.file("ok.npz"));
  const auto st = read_file_bytes(dir.file("st.npz"));
  auto open_err = [&](const std::vector<uint8_t>& b, const std::string& entry = "") {
    write_bytes(dir.file("bad.npz"), b);
    return error_of([&] {
      NpzReader r(dir.file("bad.npz"));
      for (const auto& n : r.names())
        if (entry.empty() || n == entry) r.read(n);
    });
  };
  EXPECT_NE(open_err({}).find("bad.npz: not a zip/.npz archive"), std::string::npos);
  EXPECT_NE(open_err(std::vector<uint8_t>(ok.begin(), ok.begin() + static_cast<std::ptrdiff_t>(ok.size() / 2))).find("truncated"),
            std::string::npos);
  const std::string npy_msg = open_err(serialize_npy(arrays[1].second));
  EXPECT_NE(npy_msg.find("this is a .npy file, not an .npz archive"), std::string::npos) << npy_msg;
  // Corrupt one byte of stored data: CRC mismatch names the entry.
  auto flip = st;
  flip[200] ^= 0x40;
  EXPECT_NE(open_err(flip, "w").find("bad.npz:w.npy: CRC-32 mismatch"), std::string::npos);
  // Corrupt deflate data.
  auto junk = ok;
  for (size_t i = 60; i < 90; ++i) junk[i] = 0xff;
  const std::string e = open_err(junk, "w");
  EXPECT_TRUE(e.find("corrupt deflate") != std::string::npos || e.find("CRC") != std::string::npos ||
              e.find("inflates") != std::string::npos || e.find("ends early") != std::string::npos)
      << e;
  // An absurd uncompressed size in the central directory is rejected before allocating.
  auto huge = ok;
  const size_t cd = ok.size() - 22 - 2 * (46 + 5);  // the two central entries sit just before the EOCD
  ASSERT_EQ(huge[cd], 0x50);
  ASSERT_EQ(huge[cd + 1], 0x4b);
  huge[cd + 24] = 0xfe, huge[cd + 25] = 0xff, huge[cd + 26] = 0xff, huge[cd + 27] = 0x7f;
  EXPECT_NE(open_err(huge, "w").find("implausible uncompressed size"), std::string::npos);
  const size_t scd = st.size() - 22 - 2 * (46 + 5);
  ASSERT_EQ(st[scd], 0x50);
  auto method = st;
  method[scd + 10] = 12;  // bzip2
  EXPECT_NE(open_err(method, "w").find("unsupported zip compression method 12"), std::string::npos);
  auto offset = st;
  offset[scd + 45] = 0x7f;  // local header offset far past the end
  EXPECT_NE(open_err(offset, "w").find("local header out of range"), std::string::npos);
  EXPECT_NE(error_of([] { NpzReader r("/nonexistent.npz"); }).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace foldcore::data
