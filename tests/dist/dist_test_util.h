// Helpers of the MPI tests: the process's runtime and world communicator (mpi_test_main.cpp), and
// per-rank seeded data every rank can regenerate, so each collective is checked against a naive
// reference computed locally.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"
#include "dist/runtime.h"

namespace foldcore::testing {

dist::Runtime& mpi_runtime();
dist::Communicator& mpi_world();

// n values of rank `rank` for test `seed`: uniform in [-1, 1) (floats) or [-1000, 1000] (ints).
inline std::vector<float> rank_values(uint64_t seed, int rank, int64_t n) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(rank));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}
inline std::vector<int64_t> rank_ints(uint64_t seed, int rank, int64_t n) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(rank));
  std::uniform_int_distribution<int64_t> u(-1000, 1000);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

}  // namespace foldcore::testing
