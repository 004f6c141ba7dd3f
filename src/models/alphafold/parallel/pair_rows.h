// Inference under DAP: the pair stays split by rows from the embedding to the next recycling
// iteration (`predict --dap P`), so no rank holds the whole [N, N, c_z] pair: the Evoformer and
// extra-MSA stacks take and return their rows (EvoformerStack::forward_split), the structure
// module's invariant point attention computes its query rows from them and gathers the [N, F]
// features, and the pair heads compute theirs and hand each block of logits to every rank.
//
// Layout (EvoformerStack::forward_dap's): N residues padded to padded() = rows()·P (the padding
// rows and columns are zeros, and masked wherever a stack reads them); rank r holds the rows
// [row0(), row0() + rows()) as one [rows(), padded(), c] tensor, of which real_rows() are residues.
#pragma once

#include <algorithm>
#include <functional>

#include "autograd/functions.h"
#include "models/alphafold/parallel/model_parallel.h"

namespace foldcore::af2 {

struct PairRows {
  int64_t n = 0;     // residues
  int64_t size = 1;  // ranks of the group
  int64_t rank = 0;
  static PairRows of(const ParallelGroup& g, int64_t n) { return {n, g.size(), g.rank()}; }
  int64_t rows() const { return (n + size - 1) / size; }
  int64_t padded() const { return rows() * size; }
  int64_t row0() const { return rank * rows(); }
  int64_t real_rows() const { return rows_of(rank); }
  int64_t rows_of(int64_t r) const { return std::clamp<int64_t>(n - r * rows(), 0, rows()); }
};

// Rows [0, n) of a quantity split by rows as PairRows::of(g, n), in row order, block by block
// (≤ block_rows rows): the owning rank makes each block, make(i0, r) → [r, tail…] of `dtype` on
// `device` (i0 a global row), and every rank receives it (a broadcast from the owner) and hands it
// to consume(i0, block). One block in flight at a time: O(block) memory on every rank.
void for_each_split_row_block(const ParallelGroup& g, int64_t n, int64_t block_rows, const Shape& tail, DType dtype,
                              Device device, const std::function<Tensor(int64_t i0, int64_t r)>& make,
                              const std::function<void(int64_t i0, const Tensor& block)>& consume);

// The whole [n_rows, n_cols, c] of a quantity split by rows as PairRows::of(g, n_rows) (the pair,
// the MSA, their logits) on the host of every rank, from each rank's rows [rows(), C' >= n_cols, c].
Tensor gather_split_rows_to_host(const ParallelGroup& g, const Tensor& rows, int64_t n_rows, int64_t n_cols);

// This rank's rows [rows.rows(), padded_cols, c] of a quantity split as `rows` lays it out, in
// `dtype` on `device` with zeros in the padding, made by blocks of at most `step` of its real rows:
// make(i0, len) → [len, C, c] for the global rows [i0, i0 + len) and the first C <= padded_cols
// columns (converted to `dtype` as it is copied in). Only one block exists at a time.
Tensor make_split_rows(const PairRows& rows, int64_t padded_cols, int64_t c, DType dtype, Device device, int64_t step,
                       const std::function<Tensor(int64_t i0, int64_t len)>& make);

// DAP's ring form of a gather (inference, no autograd): every rank's `local` (the same shape on
// every rank, k = its extent along `axis`) visited in pieces of at most `piece` slices along
// `axis`, rank 0's first, each broadcast from its owner, the next one in flight while
// f(q, j0, piece) runs on the current one: q is the owner, j0 the piece's first index in the
// owner's tensor (global q·k + j0). A rank holds its own tensor and two pieces instead of the
// gathered whole. f must not keep the piece (its buffer is reused two pieces later).
void for_each_ring_piece(const ParallelGroup& g, const Tensor& local, int axis, int64_t piece,
                         const std::function<void(int q, int64_t j0, const Tensor& piece)>& f);

// x [R, C, …] padded with zeros to [rows, cols, …] (x itself when it has that shape); autograd:
// the padding's gradients are dropped.
Variable pad_rows_cols(const Variable& x, int64_t rows, int64_t cols);

// The whole [rows, cols, …] of a quantity split by rows over g (each rank's [R', C', …] of the
// padded layout, R'·P >= rows, C' >= cols), gathered on every rank and the padding cut off;
// autograd: the backward hands each rank its own rows of the gradient.
Variable gather_rows_whole(const ParallelGroup& g, const Variable& rows, int64_t n_rows, int64_t n_cols);

// A [R, C] mask padded with zeros to [rows, cols] (itself when it has that shape): the padded
// positions of a DAP layout are masked wherever a module reads them.
Tensor pad_mask_2d(const Tensor& mask, int64_t rows, int64_t cols);

// The dropout of a residual add on this rank's rows ([k, …], split along axis 0) of a stream whose
// mask one process draws for all rows: a mask shared along the rows is the whole mask on every
// rank; any other (the column-wise masks) is cut to the rank's rows by its index base
// (DropoutSpec::index_base), so each rank draws its rows of the one process's mask.
autograd::DropoutSpec rows_dropout(autograd::DropoutSpec d, const ParallelGroup& g, const Shape& local);

}  // namespace foldcore::af2
