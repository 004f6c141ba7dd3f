// Triangular multiplicative update (AlphaFold2 supplement Alg. 11 "outgoing" / Alg. 12 "incoming";
// official modules "triangle_multiplication_outgoing" / "_incoming", the unfused monomer layout):
//   x = LN(z) (layer_norm_input)
//   a = mask ⊙ sigmoid(x W_lg + b_lg) ⊙ (x W_lp + b_lp)        (left_gate, left_projection)
//   b = mask ⊙ sigmoid(x W_rg + b_rg) ⊙ (x W_rp + b_rp)        (right_gate, right_projection)
//   outgoing: t_ij = Σ_k a_ik b_jk      (AF2 einsum 'ikc,jkc->ijc')
//   incoming: t_ij = Σ_k a_kj b_ki      (AF2 einsum 'kjc,kic->ijc': note left ↔ j, right ↔ i)
//   out = sigmoid(x W_g + b_g) ⊙ (LN(t) W_o + b_o)            (gating_linear, center_layer_norm,
//                                                                output_projection)
// The contraction is one batched GEMM over the channels: [c, i, k] · [c, j, k]ᵀ → [c, i, j].
// Configurable by dims (the template pair stack reuses it with c_t = 64).
//
// No-grad, unchunked, CPU fp32 (forward_inference): the four edge projections are one GEMM with
// the weights on the left, which yields a and b directly in the channel-major [c, N, N] layout of
// the contraction (no permute copies); gating and masking run in place, the contraction reuses the
// gate rows' storage and a single tiled transpose feeds the centre LayerNorm. Peak ≈ 7 pair-sized
// buffers (the graph path: 10, tests/models/test_af2_triangle_multiplication.cpp measures both
// ways).
//
// Long sequences (chunk > 0, no-grad mode): the unchunked paths keep 7-10 pair-sized temporaries
// alive at their peak (x, a, b, t, LN(t), …). The chunked paths keep one, N²·c values beside the
// stream (c = c_hidden, 128 = c_z in the Evoformer). That is the minimum: every output row
// (outgoing) or column (incoming) needs the whole right edge b, computed from the old z before the
// first element of z changes. Two ways:
//  - adding into a stream (`into`, the Evoformer's and template stack's inference path,
//    add_chunked): b whole, channel-major, from row blocks of LN(z); then per block of
//    max(chunk, N/32) output rows (outgoing) or columns (incoming): the block's left edge a (LN of
//    z and the projections in `chunk` sub-blocks), its slice of the contraction (a GEMM per
//    channel: [len, N]·[N, N]ᵀ or [N, N]ᵀ·[N, len]), then per `chunk` sub-block the centre
//    LayerNorm, output projection and gate, added into the stream. The block is at least N/32 so
//    that b (read whole by every block) streams through the GEMMs at most 32 times; its operand
//    and result add 2·c·N²/32 values. LN(z) runs twice over the pair (b, then a and the gate) while
//    N ≤ 32·chunk; beyond, the gate recomputes it for all but each block's last sub-block.
//  - returning the update (forward_chunked): t [N, N, c] is built channel block by channel block
//    (a and b for cb channels at a time, cb·N ≈ chunk·c, each block projected from LN(z) recomputed
//    per row block) and the update is written into t's storage row block by row block when the
//    dtypes and widths agree. LN(z) runs c/cb + 1 times over the pair (about N/chunk + 1 while
//    N ≤ chunk·c, c + 1 beyond, where cb is 1) and every step is one call per row block and channel
//    block.
// Peak ≈ z + (b | t) + O(chunk·N·(c + c_z)) either way (add_chunked: + 2·c·N²/32 once N > 32·chunk).
// Same arithmetic as the whole path (every element comes from the same kernels on the same
// operands; a GEMM over fewer rows/columns may take a different BLAS blocking: ~1e-7 relative
// differences).
#pragma once

#include "models/alphafold/evoformer/evoformer_util.h"

namespace foldcore::af2 {

class ParallelGroup;  // model_parallel.h

class TriangleMultiplication : public nn::Module {
 public:
  TriangleMultiplication(nn::Scope scope, int64_t c_z, int64_t c_hidden, bool outgoing);
  // z [N, N, c_z], pair_mask [N, N] → update [N, N, c_z] (before residual/dropout). chunk > 0 (and
  // chunk < N, no-grad mode): the low-memory chunked path above. `into` (no-grad only; z's own
  // stream or a [N, N, c_z] tensor the caller owns): the update is added into it (chunked: block by
  // block, so b is the only pair-sized temporary) and `into` is returned. Safe on z itself: b is
  // complete before the first write, and an output block reads only the same block of z (its left
  // edge and gate) before it is written.
  // normed: LN(z) by input_norm() in the GEMMs' dtype, made by the caller (the preceding residual
  // add: stream_residual_norm), taken instead of normalising z; unchunked (or grad mode) only.
  Variable forward(const Variable& z, const Tensor& pair_mask, int64_t chunk = 0, const Tensor& into = Tensor(),
                   const Variable& normed = Variable()) const;
  const nn::LayerNorm& input_norm() const { return layer_norm_input_; }
  // DAP (evoformer_parallel.cpp): z_rows [N/P, N, c_z] this rank's pair rows, pair_mask [N, N]
  // whole. Outgoing works on rows and gathers the right edge whole; incoming works on columns
  // (the input LayerNorm made on the rows and switched there in the wire dtype, the update switched
  // back) and gathers the edge indexed by the output row whole, channel-major ([c, N, N]: the one
  // pair-sized temporary; the edges in the wire dtype too: bf16 products times a 0/1 mask). chunk > 0: the update by chunks of `chunk` output
  // rows (the contraction, its LayerNorm, projection and gate one chunk at a time).
  // → the update's rows [N/P, N, c_z].
  // Inference with chunk > 0: b is not gathered whole; each rank's chunk of it is broadcast in turn,
  // by pieces of `chunk` rows | columns (forward_dap_ring), so a rank holds its own chunk of b and
  // two pieces of [c, chunk, N], not the [c, N, N] whole; the edges and the normalised input die
  // before the incoming one's update is switched back to rows.
  Variable forward_dap(const Variable& z_rows, const Tensor& pair_mask, const ParallelGroup& g,
                       int64_t chunk = 0) const;
  // key_prefix e.g. "evoformer/evoformer_iteration/triangle_multiplication_outgoing".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;
  bool outgoing() const { return outgoing_; }

 private:
  Variable forward_whole(const Variable& z, const Tensor& mask, const Variable& normed = Variable()) const;
  // forward_dap's inference path (evoformer_parallel.cpp): x the layer-normed pair rows | columns
  // in forward_dap's layout, edge(gate, projection) the gated, masked channel-major edge of this
  // rank → the update in x's layout (the caller switches the incoming one's back to rows).
  // The DAP paths' update from the products t [c, rows, cols] and the layer-normed input x
  // [rows, cols, c_z] of the same elements: sigmoid(gate(x)) ⊙ output_projection(LN(tᵀ)).
  Variable gated_update(const Variable& t, const Variable& x) const;
  Tensor forward_dap_ring(const Variable& x,
                          const std::function<Variable(const nn::Linear&, const nn::Linear&)>& edge,
                          const ParallelGroup& g, int64_t chunk) const;
  // No-grad, CPU fp32, unchunked: the whole path's arithmetic with channel-major projections and
  // in-place gating (no permute copies of a and b; 8 instead of ~17 pair-sized allocations).
  Variable forward_inference(const Variable& z, const Tensor& mask) const;
  Variable forward_chunked(const Variable& z, const Tensor& mask, int64_t chunk) const;
  // The chunked path with `into` (see the header comment): b whole, then output blocks.
  Variable add_chunked(const Variable& z, const Tensor& mask, int64_t chunk, const Tensor& into) const;

  bool outgoing_;
  nn::LayerNorm layer_norm_input_, center_layer_norm_;
  nn::Linear left_projection_, right_projection_, left_gate_, right_gate_, output_projection_, gating_linear_;
};

}  // namespace foldcore::af2
