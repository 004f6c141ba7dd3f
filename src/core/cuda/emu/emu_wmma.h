// WMMA stand-in (part of cuda_emu.h): m16n16k16 fragments with fp32 accumulation.
//
// Element mapping (documented, as CUDA leaves it unspecified): a fragment holds the logical
// rows×cols tile — A: M×K, B: K×N, accumulator: M×N — split evenly over the 32 lanes in
// row-major order: element e of lane l is tile entry idx = l·num_elements + e, at row idx / cols,
// column idx % cols. Code that only applies elementwise operations to fragment elements works
// with any mapping; code that assumes another mapping's positions is wrong on real hardware too.
//
// load/store/mma are warp collectives (every lane must call them, checked), and load/store check
// CUDA's requirements: a 256-bit aligned pointer and ldm a multiple of 16 bytes.
#pragma once

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols / 32;
  using element_type = T;
  T x[num_elements];
};

namespace detail {

template <typename T> void check_operand(const T* p, unsigned ldm, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) ::fc_emu::device_fail(what);
  if ((ldm * sizeof(T)) % 16 != 0) ::fc_emu::device_fail(what);
}

// Element (row, col) of a matrix in memory with leading dimension ldm.
template <typename T> T& at(T* p, unsigned ldm, bool row_major_mem, int r, int c) {
  return row_major_mem ? p[static_cast<size_t>(r) * ldm + c] : p[static_cast<size_t>(c) * ldm + r];
}

template <typename Frag, typename T> void load(Frag& f, const T* p, unsigned ldm, bool row_major_mem) {
  check_operand(p, ldm, "wmma::load_matrix_sync: pointer not 256-bit aligned or ldm not a multiple of 16 bytes");
  ::fc_emu::warp_exchange(::fc_emu::WarpOp::wmma_load, 0xffffffffu, 0, 0, 32);
  const int lane = ::fc_emu::lane_id();
  for (int e = 0; e < Frag::num_elements; ++e) {
    const int idx = lane * Frag::num_elements + e;
    f.x[e] = at(const_cast<T*>(p), ldm, row_major_mem, idx / Frag::cols, idx % Frag::cols);
  }
}

template <typename L> constexpr bool is_row_major() { return std::is_same_v<L, row_major>; }

struct MmaArgs {
  float* d;
  const void* a;
  const void* b;
  const float* c;
};

template <typename TA, typename TB, int M, int N, int K> void mma_all_lanes(void* const* lane_args) {
  constexpr int ne_a = M * K / 32, ne_b = K * N / 32, ne_c = M * N / 32;
  float A[M * K], B[K * N], C[M * N];
  for (int l = 0; l < 32; ++l) {
    const auto* a = static_cast<const MmaArgs*>(lane_args[l]);
    for (int e = 0; e < ne_a; ++e) A[l * ne_a + e] = static_cast<float>(static_cast<const TA*>(a->a)[e]);
    for (int e = 0; e < ne_b; ++e) B[l * ne_b + e] = static_cast<float>(static_cast<const TB*>(a->b)[e]);
    for (int e = 0; e < ne_c; ++e) C[l * ne_c + e] = a->c[e];
  }
  // D = A·B + C: the products of 16-bit inputs are exact in fp32; accumulate in k order.
  float D[M * N];
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float acc = C[m * N + n];
      for (int k = 0; k < K; ++k) acc = std::fma(A[m * K + k], B[k * N + n], acc);
      D[m * N + n] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    const auto* a = static_cast<const MmaArgs*>(lane_args[l]);
    for (int e = 0; e < ne_c; ++e) a->d[e] = D[l * ne_c + e];
  }
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename L, typename V>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
  for (auto& e : f.x) e = static_cast<T>(v);
}

template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load needs the memory layout");
  detail::load(f, p, ldm, detail::is_row_major<L>());
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t layout) {
  detail::load(f, p, ldm, layout == mem_row_major);
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout) {
  using Frag = fragment<accumulator, M, N, K, float>;
  detail::check_operand(p, ldm, "wmma::store_matrix_sync: pointer not 256-bit aligned or ldm not a multiple of 16 bytes");
  ::fc_emu::warp_exchange(::fc_emu::WarpOp::wmma_store, 0xffffffffu, 0, 0, 32);
  const int lane = ::fc_emu::lane_id();
  for (int e = 0; e < Frag::num_elements; ++e) {
    const int idx = lane * Frag::num_elements + e;
    detail::at(p, ldm, layout == mem_row_major, idx / Frag::cols, idx % Frag::cols) = f.x[e];
  }
}

template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  detail::MmaArgs args{d.x, a.x, b.x, c.x};
  ::fc_emu::warp_collective(::fc_emu::WarpOp::wmma_mma, 0xffffffffu, &detail::mma_all_lanes<TA, TB, M, N, K>, &args);
}

}  // namespace nvcuda::wmma
