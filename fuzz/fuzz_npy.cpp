// NumPy: inputs starting with the zip signature "PK" go to the .npz reader (through a file in
// /dev/shm, since NpzReader reads by path), every entry read and converted; all others go to
// parse_npy. An accepted .npy must round-trip through serialize_npy unchanged, and to_tensor must
// either convert it or reject it cleanly.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "data_pipeline/formats/npy.h"
#include "fuzz_util.h"

using namespace foldcore::data;

namespace {

void check_array(const NpyArray& a) {
  const std::vector<uint8_t> bytes = serialize_npy(a);
  foldcore::fuzz::expect_valid(
      [&] {
        const NpyArray b = parse_npy(bytes.data(), bytes.size(), "round-trip.npy");
        if (!(b.dtype == a.dtype) || b.shape != a.shape || b.data != a.data)
          foldcore::fuzz::property_failed("npy serialize/parse round trip differs");
      },
      "serialize_npy output rejected by parse_npy");
  foldcore::fuzz::expect_clean([&] { (void)a.to_tensor(); });
  if (a.dtype.kind == 'S') (void)a.strings();
}

// The per-process scratch file for .npz inputs; removed at exit.
struct ScratchFile {
  std::string path = "/dev/shm/foldcore_fuzz_" + std::to_string(::getpid()) + ".npz";
  ~ScratchFile() { std::remove(path.c_str()); }
};

void fuzz_npz(const uint8_t* data, size_t size) {
  static ScratchFile scratch;
  FILE* f = std::fopen(scratch.path.c_str(), "wb");
  if (f == nullptr) foldcore::fuzz::property_failed("cannot create the /dev/shm scratch file");
  const bool ok = std::fwrite(data, 1, size, f) == size;
  if (std::fclose(f) != 0 || !ok) foldcore::fuzz::property_failed("cannot write the /dev/shm scratch file");
  foldcore::fuzz::expect_clean([&] {
    NpzReader reader(scratch.path);
    for (const std::string& name : reader.names()) {
      if (!reader.contains(name)) foldcore::fuzz::property_failed("npz names() entry not found by contains()");
      foldcore::fuzz::expect_clean([&] { check_array(reader.read(name)); });
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > foldcore::fuzz::kMaxInputBytes) return 0;
  if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
    fuzz_npz(data, size);
  } else {
    foldcore::fuzz::expect_clean([&] { check_array(parse_npy(data, size, "fuzz.npy")); });
  }
  return 0;
}
