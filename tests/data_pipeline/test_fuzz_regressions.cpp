// Regression tests for the findings of the parser fuzzers (fuzz/, scripts/fuzz.sh). Each test
// replays the (minimised) input a fuzzer found and asserts the fixed behaviour: a clean
// foldcore::Error naming the input, or the correct parse. Inputs are spelled out as C++ strings
// so the tests need no data files.
#include <gtest/gtest.h>

#include <string>

#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/formats/hhr.h"
#include "data_pipeline/formats/npy.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

// Runs fn and returns the foldcore::Error message ("" when it did not throw).
template <typename Fn> std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// fuzz_fasta: with Alphabet::kAny a sequence may hold '>' (any printable character); wrapped by
// format_fasta so that a line starts with it, the output read back as an extra record. A FASTA
// sequence line cannot start with '>', so the writer now refuses such sequences.
TEST(FuzzRegressions, FastaWriterRejectsHeaderCharacterInSequence) {
  FastaOptions any;
  any.alphabet = Alphabet::kAny;
  const auto records = parse_fasta(">6KWC_1\nGSTIQ>query\n", "crash.fasta", any);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].sequence, "GSTIQ>query");
  const std::string err = error_of([&] { (void)format_fasta(records, 5); });
  EXPECT_NE(err.find("format_fasta"), std::string::npos) << err;
  EXPECT_NE(err.find("'>'"), std::string::npos) << err;
  // Whitespace would be trimmed or split lines on reading: refused too.
  EXPECT_NE(error_of([] { (void)format_fasta({{"a", "AC D"}}); }), "");
  EXPECT_NE(error_of([] { (void)format_fasta({{"a", "AC\nD"}}); }), "");
  // Ordinary records still round-trip.
  const std::vector<FastaRecord> ok = {{"a b", "ACDEFGHIK"}, {"c", "--kl"}};
  const auto again = parse_fasta(format_fasta(ok, 4), "again.fasta", any);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[1].sequence, "--kl");
}

// One hit whose summary line carries `aligned_cols`, with a valid 3-column alignment.
std::string hhr_with_aligned_cols(const std::string& aligned_cols) {
  return "Query         q\n\nNo 1\n>1ABC_A x\nProbab=99.5 E-value=1e-5 Score=50.1 Aligned_cols=" + aligned_cols +
         " Identities=40% Similarity=0.5 Sum_probs=2.0 Template_Neff=3.1\n\n"
         "Q q                1 ACD    3 (3)\n"
         "T 1ABC_A           5 ACE    7 (9)\n";
}

// fuzz_hhr: "Aligned_cols=1.9e+121" was converted to int unchecked (undefined behaviour; UBSan
// "outside the range of representable values of type 'int'"; x86 gives INT_MIN silently). It is
// now a parse error naming the field, like any other bad number; so are negative and fractional
// counts (AlphaFold's parser reads the field with int()).
TEST(FuzzRegressions, HhrAlignedColsOutOfIntRange) {
  const auto ok = parse_hhr(hhr_with_aligned_cols("3"), "ok.hhr");
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].aligned_cols, 3);
  EXPECT_EQ(ok[0].indices_hit, (std::vector<int32_t>{4, 5, 6}));
  for (const std::string bad : {"1.9e+121", "-1.9e+121", "2147483648", "-2", "2.5", "nan", "inf"}) {
    const std::string err = error_of([&] { (void)parse_hhr(hhr_with_aligned_cols(bad), "crash.hhr"); });
    EXPECT_NE(err.find("crash.hhr:5"), std::string::npos) << bad << ": " << err;
    EXPECT_NE(err.find("Aligned_cols"), std::string::npos) << bad << ": " << err;
  }
}

// fuzz_hhr (its index/gap invariant, on an input written from the failure pattern): a template
// line "T 1ABC_A 2147483647 ACE ..." made residue indices past INT32_MAX, which wrapped to negative
// values in indices_hit, where -1 means a gap. Residue numbers beyond the int32 range are now a
// parse error.
TEST(FuzzRegressions, HhrResidueIndexBeyondInt32) {
  const std::string head =
      "Query         q\n\nNo 1\n>1ABC_A x\nProbab=99.5 E-value=1e-5 Score=50.1 Aligned_cols=3 Identities=40% "
      "Similarity=0.5 Sum_probs=2.0 Template_Neff=3.1\n\nQ q                1 ACD    3 (3)\n";
  // Residues at 2147483645..2147483647 (1-based) have indices up to INT32_MAX - 1: fine.
  const auto ok = parse_hhr(head + "T 1ABC_A          2147483645 ACE 2147483647 (9)\n", "ok.hhr");
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].indices_hit.back(), 2147483646);
  for (const std::string start : {"2147483647", "2147483648", "9223372036854775807"}) {
    const std::string err = error_of([&] {
      const auto hits = parse_hhr(head + "T 1ABC_A          " + start + " ACE 2147483649 (9)\n", "crash.hhr");
      for (int32_t i : hits.at(0).indices_hit) EXPECT_GE(i, 0);
    });
    EXPECT_NE(err.find("crash.hhr:8"), std::string::npos) << start << ": " << err;
    EXPECT_NE(err.find("int32"), std::string::npos) << start << ": " << err;
  }
  // The query line is checked the same way.
  const std::string q_err = error_of([] {
    (void)parse_hhr("Query q\nNo 1\n>x\nProbab=1 E-value=1 Aligned_cols=1 Sum_probs=1\n"
                    "Q q                2147483648 A 2147483648 (9)\nT x                1 A 1 (1)\n", "q.hhr");
  });
  EXPECT_NE(q_err.find("int32"), std::string::npos) << q_err;
}

// fuzz_npy: a '<f2' array of shape (1000000000026039322, 0) has no elements; to_tensor copied its
// (empty) data with memcpy into the 0-element tensor's null storage pointer, which is undefined
// behaviour (UBSan: "null pointer passed as argument 1"). Every dtype now converts an empty
// array into an empty tensor of the right shape. (The undefined memcpy did not misbehave in the
// ordinary build; under the sanitizers, fuzz/regressions/npy/ replays the original input.)
// A version 1.0 .npy image with the given header dict and no data bytes.
std::string npy_image(const std::string& header) {
  std::string image = std::string("\x93NUMPY\x01\x00", 8);
  std::string dict = header;
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  image += static_cast<char>(dict.size() & 0xff);
  image += static_cast<char>(dict.size() >> 8);
  return image + dict;
}

NpyArray parse_npy_string(const std::string& image, const std::string& what) {
  return parse_npy(reinterpret_cast<const uint8_t*>(image.data()), image.size(), what);
}

TEST(FuzzRegressions, NpyEmptyArrayToTensor) {
  const NpyArray a =
      parse_npy_string(npy_image("{'descr': '<f2', 'fortran_order': False, 'shape': (1000000000026039322, 0), }"),
                       "crash.npy");
  EXPECT_EQ(a.numel(), 0);
  const Tensor t = a.to_tensor();
  EXPECT_EQ(t.dtype(), DType::f16);
  EXPECT_EQ(t.shape().vec(), (std::vector<int64_t>{1000000000026039322, 0}));
  for (const NpyDType dtype : {NpyDType{'f', 2}, NpyDType::f32(), NpyDType::f64(), NpyDType::u8(), NpyDType::boolean(),
                               NpyDType{'i', 1}, NpyDType::i32(), NpyDType::i64(), NpyDType{'u', 8}}) {
    const NpyArray empty{dtype, {0, 5}, {}};
    const Tensor e = empty.to_tensor();
    EXPECT_EQ(e.numel(), 0) << dtype.descr();
    EXPECT_EQ(e.shape().vec(), (std::vector<int64_t>{0, 5})) << dtype.descr();
  }
}

// fuzz_npy: shape (0, 7015607419526039322, 2) has no elements, so the overflow check of the element
// count passed it, but the product of its nonzero extents overflows int64: to_tensor's contiguous
// strides overflowed (UBSan: "signed integer overflow: 2 * 7015607419526039322"), as would the
// Fortran-order reordering. parse_npy now rejects such shapes.
TEST(FuzzRegressions, NpyZeroExtentShapeOverflow) {
  for (const std::string order : {"False", "True"}) {
    const std::string err = error_of([&] {
      (void)parse_npy_string(
          npy_image("{'descr': '<f8', 'fortran_order': " + order + ", 'shape': (0, 7015607419526039322, 2), }"),
          "crash.npy");
    });
    EXPECT_NE(err.find("crash.npy"), std::string::npos) << err;
    EXPECT_NE(err.find("shape overflows"), std::string::npos) << err;
  }
  // Large but representable nonzero extents with a 0 extent are still a valid empty array.
  const NpyArray ok = parse_npy_string(
      npy_image("{'descr': '<f8', 'fortran_order': True, 'shape': (0, 3037000499, 3037000499), }"), "ok.npy");
  EXPECT_EQ(ok.numel(), 0);
  EXPECT_EQ(ok.to_tensor().numel(), 0);
}

}  // namespace
}  // namespace foldcore::data
