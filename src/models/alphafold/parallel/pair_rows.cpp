#include "models/alphafold/parallel/pair_rows.h"

#include <memory>
#include <utility>
#include <vector>

#include "autograd/functions.h"
#include "core/error.h"

namespace foldcore::af2 {

void for_each_split_row_block(const ParallelGroup& g, int64_t n, int64_t block_rows, const Shape& tail, DType dtype,
                              Device device, const std::function<Tensor(int64_t, int64_t)>& make,
                              const std::function<void(int64_t, const Tensor&)>& consume) {
  FC_CHECK(block_rows >= 1, "for_each_split_row_block: block_rows must be >= 1, got ", block_rows);
  const PairRows pr = PairRows::of(g, n);
  for (int64_t q = 0; q < pr.size; ++q) {
    const int64_t first = q * pr.rows(), real = pr.rows_of(q);
    for (int64_t k = 0; k < real; k += block_rows) {
      const int64_t i0 = first + k, r = std::min(block_rows, real - k);
      Shape s{r};
      for (int64_t d : tail) s.push_back(d);
      Tensor block;
      if (q == pr.rank) {
        block = make(i0, r).contiguous();
        FC_CHECK(block.shape() == s && block.dtype() == dtype, "for_each_split_row_block: block ",
                 block.shape().str(), " ", dtype_name(block.dtype()), " made for rows ", i0, "..", i0 + r,
                 ", expected ", s.str(), " ", dtype_name(dtype));
        if (block.device() != device) block = block.to(device);
      } else {
        block = Tensor::empty(s, dtype, device);
      }
      g.broadcast_async(block, static_cast<int>(q))->wait();
      consume(i0, block);
    }
  }
}

Tensor gather_split_rows_to_host(const ParallelGroup& g, const Tensor& rows, int64_t n_rows, int64_t n_cols) {
  const PairRows pr = PairRows::of(g, n_rows);
  FC_CHECK(rows.dim() == 3 && rows.size(0) == pr.rows() && rows.size(1) >= n_cols, "gather_split_rows_to_host: rows ",
           rows.shape().str(), " are not [", pr.rows(), ", >= ", n_cols, ", c] (", n_rows, " rows over ", pr.size,
           " ranks)");
  const int64_t c = rows.size(2);
  Tensor out = Tensor::empty({n_rows, n_cols, c}, rows.dtype(), Device::cpu());
  // ~16 MiB blocks (at least one row).
  const int64_t block = std::max<int64_t>(1, (int64_t{4} << 20) / std::max<int64_t>(1, n_cols * c));
  for_each_split_row_block(
      g, n_rows, block, {n_cols, c}, rows.dtype(), rows.device(),
      [&](int64_t i0, int64_t r) { return rows.narrow(0, i0 - pr.row0(), r).narrow(1, 0, n_cols); },
      [&](int64_t i0, const Tensor& b) { out.narrow(0, i0, b.size(0)).copy_(b); });
  return out;
}

Tensor make_split_rows(const PairRows& rows, int64_t padded_cols, int64_t c, DType dtype, Device device, int64_t step,
                       const std::function<Tensor(int64_t, int64_t)>& make) {
  FC_CHECK(step >= 1, "make_split_rows: step must be >= 1, got ", step);
  Tensor out = Tensor::zeros({rows.rows(), padded_cols, c}, dtype, device);
  for (int64_t k = 0; k < rows.real_rows(); k += step) {
    const int64_t len = std::min(step, rows.real_rows() - k);
    const Tensor block = make(rows.row0() + k, len);
    FC_CHECK(block.defined() && block.dim() == 3 && block.size(0) == len && block.size(1) <= padded_cols &&
                 block.size(2) == c,
             "make_split_rows: block ", block.defined() ? block.shape().str() : "undefined", " made for rows ",
             rows.row0() + k, "..", rows.row0() + k + len, " (expected [", len, ", <= ", padded_cols, ", ", c, "])");
    out.narrow(0, k, len).narrow(1, 0, block.size(1)).copy_(block);
  }
  return out;
}

Tensor pad_mask_2d(const Tensor& mask, int64_t rows, int64_t cols) {
  FC_CHECK(mask.defined() && mask.dim() == 2 && mask.size(0) <= rows && mask.size(1) <= cols, "pad_mask_2d: mask ",
           mask.defined() ? mask.shape().str() : "undefined", " does not fit [", rows, ", ", cols, "]");
  if (mask.size(0) == rows && mask.size(1) == cols) return mask;
  Tensor out = Tensor::zeros({rows, cols}, mask.dtype(), mask.device());
  out.narrow(0, 0, mask.size(0)).narrow(1, 0, mask.size(1)).copy_(mask);
  return out;
}

void for_each_ring_piece(const ParallelGroup& g, const Tensor& local, int axis, int64_t piece,
                         const std::function<void(int, int64_t, const Tensor&)>& f) {
  FC_CHECK(local.defined() && axis >= 0 && axis < local.dim() && piece >= 1 && local.size(axis) >= 1,
           "for_each_ring_piece: ", local.defined() ? local.shape().str() : "undefined", " along axis ", axis,
           " in pieces of ", piece);
  const int64_t k = local.size(axis);
  Tensor buffers[2];
  int next_buffer = 0;
  // Piece (q, j0) into the next buffer: the owner copies it from `local`, every rank receives it.
  const auto start = [&](int q, int64_t j0, Tensor& into) {
    const int64_t len = std::min(piece, k - j0);
    Tensor& buf = buffers[next_buffer++ % 2];
    Shape shape = local.shape();
    shape[axis] = len;
    if (!buf.defined() || buf.shape() != shape) buf = Tensor::empty(shape, local.dtype(), local.device());
    if (q == g.rank()) buf.copy_(local.narrow(axis, j0, len));
    into = buf;
    return g.broadcast_async(into, q);
  };
  std::vector<std::pair<int, int64_t>> pieces;
  for (int q = 0; q < g.size(); ++q)
    for (int64_t j0 = 0; j0 < k; j0 += piece) pieces.emplace_back(q, j0);
  Tensor current, following;
  std::unique_ptr<PendingReduction> pending = start(pieces[0].first, pieces[0].second, current);
  for (size_t n = 0; n < pieces.size(); ++n) {
    pending->wait();
    if (n + 1 < pieces.size()) pending = start(pieces[n + 1].first, pieces[n + 1].second, following);
    f(pieces[n].first, pieces[n].second, current);
    current = following;
  }
}

Variable pad_rows_cols(const Variable& x, int64_t rows, int64_t cols) {
  FC_CHECK(x.defined() && x.dim() >= 2 && x.size(0) <= rows && x.size(1) <= cols, "pad_rows_cols: ",
           x.defined() ? x.shape().str() : "undefined", " to ", rows, " x ", cols);
  Variable out = x;
  for (const auto& [axis, size] : {std::pair<int, int64_t>{0, rows}, {1, cols}}) {
    if (out.size(axis) == size) continue;
    Shape s = out.shape();
    s[axis] = size - out.size(axis);
    out = autograd::concat({out, Variable(Tensor::zeros(s, out.dtype(), out.device()))}, axis);
  }
  return out;
}

Variable gather_rows_whole(const ParallelGroup& g, const Variable& rows, int64_t n_rows, int64_t n_cols) {
  FC_CHECK(rows.defined() && rows.dim() >= 2 && rows.size(0) * g.size() >= n_rows && rows.size(1) >= n_cols,
           "gather_rows_whole: rows ", rows.defined() ? rows.shape().str() : "undefined", " over ", g.size(),
           " ranks do not cover ", n_rows, " x ", n_cols);
  Variable whole = g.gather_replicated(rows, 0);
  if (whole.size(0) != n_rows || whole.size(1) != n_cols)
    whole = autograd::contiguous(autograd::narrow(autograd::narrow(whole, 0, 0, n_rows), 1, 0, n_cols));
  return whole;
}

autograd::DropoutSpec rows_dropout(autograd::DropoutSpec d, const ParallelGroup& g, const Shape& local) {
  if (d.p == 0.f || d.gen == nullptr || g.size() == 1) return d;
  const int dim = local.size();
  std::vector<bool> shared(static_cast<size_t>(dim), false);
  for (int a : d.shared_dims) shared[static_cast<size_t>(a < 0 ? a + dim : a)] = true;
  if (shared[0]) return d;
  int64_t per_row = 1;  // mask elements per row: the unshared later axes
  for (int a = 1; a < dim; ++a)
    if (!shared[static_cast<size_t>(a)]) per_row *= local[a];
  d.index_base = g.rank() * local[0] * per_row;
  return d;
}

}  // namespace foldcore::af2
