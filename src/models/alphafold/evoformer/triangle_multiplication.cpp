#include "models/alphafold/evoformer/triangle_multiplication.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/leaf_use.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace foldcore::af2 {
namespace {

// add_chunked: the contraction runs in at most this many blocks of output rows (or columns).
constexpr int64_t kMinBlocks = 32;

}  // namespace

TriangleMultiplication::TriangleMultiplication(nn::Scope scope, int64_t c_z, int64_t c_hidden, bool outgoing)
    : Module(std::move(scope)),
      outgoing_(outgoing),
      layer_norm_input_(child_scope("layer_norm_input"), c_z),
      center_layer_norm_(child_scope("center_layer_norm"), c_hidden),
      left_projection_(child_scope("left_projection"), c_z, c_hidden),
      right_projection_(child_scope("right_projection"), c_z, c_hidden),
      left_gate_(child_scope("left_gate"), c_z, c_hidden, {nn::Init::gating, true}),
      right_gate_(child_scope("right_gate"), c_z, c_hidden, {nn::Init::gating, true}),
      output_projection_(child_scope("output_projection"), c_hidden, c_z, {nn::Init::final, true}),
      gating_linear_(child_scope("gating_linear"), c_z, c_z, {nn::Init::gating, true}) {
  for (nn::Module* c : std::initializer_list<nn::Module*>{&layer_norm_input_, &center_layer_norm_, &left_projection_,
                                                          &right_projection_, &left_gate_, &right_gate_,
                                                          &output_projection_, &gating_linear_})
    register_child(*c);
  // The five projections of the normalised input run as one op (forward_whole): their weights and
  // biases back to back, in that op's order, so its stacks are views and its dW one product.
  const nn::Linear* projections[] = {&left_projection_, &left_gate_, &right_projection_, &right_gate_,
                                     &gating_linear_};
  std::vector<Variable> weights, biases;
  for (const nn::Linear* l : projections) {
    weights.push_back(l->weight());
    biases.push_back(l->bias());
  }
  place_together(weights);
  place_together(biases);
}

Variable TriangleMultiplication::forward(const Variable& z, const Tensor& pair_mask, int64_t chunk,
                                         const Tensor& into, const Variable& normed) const {
  const int64_t c_z = layer_norm_input_.scale().numel();
  FC_CHECK(z.dim() == 3 && z.size(0) == z.size(1) && z.size(2) == c_z && pair_mask.dim() == 2 &&
               pair_mask.size(0) == z.size(0) && pair_mask.size(1) == z.size(1),
           "TriangleMultiplication '", path(), "': z ", z.shape().str(), ", pair_mask ", pair_mask.shape().str(),
           " (expected [N, N, ", c_z, "] and [N, N])");
  const Tensor mask = mask_in(pair_mask, DType::f32).contiguous();
  FC_CHECK(!into.defined() || !autograd::grad_enabled(), "TriangleMultiplication '", path(),
           "': adding into a stream needs no-grad mode");
  check_normalised_input("TriangleMultiplication '" + path() + "'", normed, z, chunk, z.size(0));
  if (!autograd::grad_enabled()) {
    if (chunk > 0 && chunk < z.size(0)) {
      return into.defined() ? add_chunked(z, mask, chunk, into) : forward_chunked(z, mask, chunk);
    }
    // The fp32 CPU inference path calls the GEMMs directly: not under bf16 autocast, where the
    // autograd ops (forward_whole) give the bf16 numerics of the graph path (a recomputed training
    // segment's forward must match its rerun). A given LN(z) (a training step's no-grad forward)
    // goes the graph path's way too.
    Variable u = z.device().is_cpu() && z.dtype() == DType::f32 && !autograd::autocast_dtype() && !normed.defined()
                     ? forward_inference(z, mask)
                     : forward_whole(z, mask, normed);
    if (!into.defined()) return u;
    add_into(into, u.value());
    return Variable(into);
  }
  return forward_whole(z, mask, normed);
}

Variable TriangleMultiplication::forward_whole(const Variable& z, const Tensor& mask, const Variable& normed) const {
  const Variable x = normed.defined() ? normed : layer_norm_input_.forward_for_gemm(z);  // [N, N, c_z], the GEMMs' dtype
  // The five projections of x in one op (x cast once, one strided-batch GEMM where the widths
  // agree, one dx in the backward). The output gate's projection is made here too, in every mode, so
  // a recomputed segment's no-grad forward and its rerun compute it the same way.
  const std::vector<Variable> p =
      nn::project(x, {&left_projection_, &left_gate_, &right_projection_, &right_gate_, &gating_linear_});
  // The edges a = mask ⊙ σ(gate) ⊙ proj, channel-major [c, N, N] (the batch of the GEMM is the
  // channel), each in one pass from the projections (masked_gate_channel_major: the values of the
  // gate, the mask multiply and the permute it replaces). The mask (0 or 1) in the edges' dtype:
  // under bf16 autocast the edges and the contraction's operands stay bf16 (the same values).
  const Tensor edge_mask = mask_in(mask, p[0].dtype());  // [N, N]
  const Variable ac = autograd::masked_gate_channel_major(p[1], p[0], edge_mask);
  const Variable bc = autograd::masked_gate_channel_major(p[3], p[2], edge_mask);
  // outgoing: t[c,i,j] = Σ_k a[c,i,k] b[c,j,k]  = A·Bᵀ
  // incoming: t[c,i,j] = Σ_k b[c,k,i] a[c,k,j]  = Bᵀ·A
  const Variable t = outgoing_ ? autograd::matmul(ac, bc, false, true) : autograd::matmul(bc, ac, true, false);
  // LN over t's channels, read channel-major and written [N, N, c]: no transposed copy of t (nor,
  // in the backward, of its gradient).
  const Variable o = output_projection_.forward(center_layer_norm_.forward_channel_major(t));  // [N, N, c_z]
  return autograd::sigmoid_gate(p[4], o);
}

Variable TriangleMultiplication::forward_inference(const Variable& z, const Tensor& mask) const {
  const int64_t n = z.size(0), c = left_projection_.out_features(), c_z = z.size(2), nn = n * n;
  const Tensor x = layer_norm_input_.forward(z).value();  // [N, N, c_z]
  // The four edge projections as one GEMM with the weights on the left, so the result comes out
  // channel-major, the layout of the per-channel contraction: rows [lp | lg | rp | rg] of
  //   y[q, p] = Σ_k W_cat[k, q] x[p, k] + b_cat[q]     (y = W_catᵀ·xᵀ + b_cat, [4c, N²]).
  // The row bias is pre-filled into y and the GEMM accumulates onto it (beta = 1); that fill takes
  // the place of the zeroing pass a beta = 0 GEMM makes anyway.
  const nn::Linear* parts[4] = {&left_projection_, &left_gate_, &right_projection_, &right_gate_};
  // Their values are read directly: a recompute segment's leaf collector is told (leaf_use.h).
  for (const nn::Linear* l : parts) autograd::note_leaf_uses({l->weight(), l->bias()});
  Tensor w_cat = Tensor::empty({c_z, 4 * c}, DType::f32), b_cat = Tensor::empty({4 * c, 1}, DType::f32);
  for (int64_t q = 0; q < 4; ++q) {
    w_cat.narrow(1, q * c, c).copy_(parts[q]->weight().value());
    b_cat.narrow(0, q * c, c).copy_(parts[q]->bias().value().unsqueeze(-1));
  }
  Tensor y = Tensor::empty({4 * c, nn}, DType::f32);
  y.copy_(b_cat.expand({4 * c, nn}));
  ops::GemmArgs args;
  args.trans_a = args.trans_b = true;
  args.beta = 1.f;
  ops::gemm(w_cat, x.view({nn, c_z}), y, args);
  // a = mask ⊙ sigmoid(gate) ⊙ proj, in place over the projection rows (ops allow aliasing).
  const Tensor lp = y.narrow(0, 0, c), lg = y.narrow(0, c, c), rp = y.narrow(0, 2 * c, c), rg = y.narrow(0, 3 * c, c);
  const Tensor mask_row = mask.view({1, nn});
  ops::sigmoid_gate_forward(lg, lp, lp);
  ops::mul(lp, mask_row, lp);
  ops::sigmoid_gate_forward(rg, rp, rp);
  ops::mul(rp, mask_row, rp);
  // The gate rows are free now: the contraction (same products as the whole path) goes into lg's
  // storage, its transpose to [N, N, c] (one tiled copy) into rg's.
  const Tensor ac = lp.view({c, n, n}), bc = rp.view({c, n, n}), t = lg.view({c, n, n});
  ops::GemmArgs targs;
  if (outgoing_) {
    targs.trans_b = true;
    ops::gemm(ac, bc, t, targs);  // t[c,i,j] = Σ_k a[c,i,k] b[c,j,k]
  } else {
    targs.trans_a = true;
    ops::gemm(bc, ac, t, targs);  // t[c,i,j] = Σ_k b[c,k,i] a[c,k,j]
  }
  Tensor t_ij = rg.view({n, n, c});
  t_ij.copy_(t.permute({1, 2, 0}));
  const Tensor o = output_projection_.forward(center_layer_norm_.forward(Variable(t_ij))).value();  // [N, N, c_z]
  const Tensor g = gating_linear_.forward(Variable(x)).value();
  ops::sigmoid_gate_forward(g, o, o);
  return Variable(o);
}

Variable TriangleMultiplication::forward_chunked(const Variable& z, const Tensor& mask, int64_t chunk) const {
  const int64_t n = z.size(0), c = left_projection_.out_features(), c_z = z.size(2);
  // Channel block: cb·N² elements per edge tensor ≈ chunk·N·c, the size of one row chunk of a.
  const int64_t cb = std::clamp<int64_t>(chunk * c / n, 1, c);
  // The block [c0, c0 + len) of a Linear's output columns (weights [in, out], bias [out]).
  struct Slice {
    Variable w, b;
  };
  auto slice = [](const nn::Linear& l, int64_t c0, int64_t len) {
    return Slice{Variable(l.weight().value().narrow(1, c0, len).contiguous()),
                 Variable(l.bias().value().narrow(0, c0, len).contiguous())};
  };
  for (const nn::Linear* l : {&left_projection_, &left_gate_, &right_projection_, &right_gate_})
    autograd::note_leaf_uses({l->weight(), l->bias()});  // read directly below (leaf_use.h)
  Tensor t;  // [N, N, c]: the contraction, channel block by channel block
  for (int64_t c0 = 0; c0 < c; c0 += cb) {
    const int64_t cl = std::min(cb, c - c0);
    const Slice lp = slice(left_projection_, c0, cl), lg = slice(left_gate_, c0, cl);
    const Slice rp = slice(right_projection_, c0, cl), rg = slice(right_gate_, c0, cl);
    Tensor ac, bc;  // [cl, N, N]: ac[q, r, s] = a[r, s, c0 + q] (both directions use this layout)
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
      const int64_t len = std::min(chunk, n - i0);
      const Variable x = layer_norm_input_.forward_for_gemm(autograd::narrow(z, 0, i0, len));  // [len, N, c_z]
      const Variable m3(mask.narrow(0, i0, len).unsqueeze(-1));                      // [len, N, 1]
      auto edge = [&](const Slice& gate, const Slice& proj) {  // mask ⊙ sigmoid(x W_g + b_g) ⊙ (x W_p + b_p)
        return autograd::mul(
            autograd::sigmoid_gate(autograd::linear(x, gate.w, gate.b), autograd::linear(x, proj.w, proj.b)), m3);
      };
      const Variable a = edge(lg, lp), b = edge(rg, rp);  // [len, N, cl]
      if (!ac.defined()) {
        ac = Tensor::empty({cl, n, n}, a.dtype(), a.device());
        bc = Tensor::empty({cl, n, n}, b.dtype(), b.device());
      }
      ac.narrow(1, i0, len).copy_(a.value().permute({2, 0, 1}));
      bc.narrow(1, i0, len).copy_(b.value().permute({2, 0, 1}));
    }
    const Variable av(ac), bv(bc);
    const Variable tb = outgoing_ ? autograd::matmul(av, bv, false, true) : autograd::matmul(bv, av, true, false);
    if (!t.defined()) t = Tensor::empty({n, n, c}, tb.dtype(), tb.device());
    t.narrow(2, c0, cl).copy_(tb.value().permute({1, 2, 0}));  // [cl, N, N] → t[:, :, c0:c0+cl]
  }
  // Output per row block: row i of the update needs only row i of t and of z, so the update may
  // overwrite t's rows as they are consumed.
  Tensor out;
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t len = std::min(chunk, n - i0);
    const Variable x = layer_norm_input_.forward_for_gemm(autograd::narrow(z, 0, i0, len));
    const Variable o = output_projection_.forward(center_layer_norm_.forward(Variable(t.narrow(0, i0, len))));
    const Variable u = autograd::sigmoid_gate(gating_linear_.forward(x), o);  // [len, N, c_z]
    if (!out.defined())
      out = c == c_z && u.dtype() == t.dtype() ? t : Tensor::empty({n, n, c_z}, u.dtype(), u.device());
    out.narrow(0, i0, len).copy_(u.value());
  }
  return Variable(out);
}

Variable TriangleMultiplication::add_chunked(const Variable& z, const Tensor& mask, int64_t chunk,
                                             const Tensor& into) const {
  const int64_t n = z.size(0), c = left_projection_.out_features();
  FC_CHECK(into.dim() == 3 && into.size(0) == n && into.size(1) == n && into.size(2) == z.size(2), "TriangleMultiplication '",
           path(), "': stream ", into.shape().str(), " for z ", z.shape().str());
  // Blocks of `chunk` rows (outgoing) or columns (incoming) of the output: the axis along which
  // an output block needs only the same block of z and of the left edge a.
  const int axis = outgoing_ ? 0 : 1;
  // The mask in the edges' dtype (0 and 1 are exact in bf16), so masking promotes nothing to fp32.
  const DType edge_dtype = autograd::autocast_dtype().value_or(z.dtype());
  const Tensor emask = mask.to(edge_dtype);
  auto block = [&](const Tensor& t, int64_t s, int64_t len) { return t.narrow(axis, s, len).contiguous(); };
  // mask ⊙ σ(x W_g + b_g) ⊙ (x W_p + b_p), gated and masked in the projection's storage.
  auto edge = [](const Variable& x, const Tensor& m3, const nn::Linear& gate, const nn::Linear& proj) {
    const Tensor p = proj.forward(x).value();
    ops::sigmoid_gate_forward(gate.forward(x).value(), p, p);
    ops::mul(p, m3, p);
    return p;
  };
  // 1. The right edge b, whole and channel-major (bc[q, r, s] = b[r, s, q]), from row blocks of
  //    the old z: the one pair-sized temporary.
  Tensor bc;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t len = std::min(chunk, n - r0);
    const Variable x = layer_norm_input_.forward_for_gemm(autograd::narrow(z, 0, r0, len));  // [len, N, c_z]
    const Tensor b = edge(x, emask.narrow(0, r0, len).unsqueeze(-1), right_gate_, right_projection_);  // [len, N, c]
    // In the contraction's operand dtype (bf16 under autocast), so the GEMMs cast nothing whole.
    if (!bc.defined()) bc = Tensor::empty({c, n, n}, edge_dtype, b.device());
    bc.narrow(1, r0, len).copy_(b.permute({2, 0, 1}));
  }
  const Variable bv(bc);
  // 2. Per output block: its left edge, its slice of the contraction, the output projection and
  //    gate, added into the stream. Block k reads only block k of z, written after the read, so
  //    `into` may be z itself.
  // The contraction's blocks are at least N/kMinBlocks rows (or columns): each block streams the
  // whole of b (N²·c values, converted to fp32 per channel on the CPU) through GEMMs with `len`
  // rows, so blocks of `chunk` rows at long N would make that streaming cost as much as the
  // products (N = 5,600, chunk 16: 350 passes over b). The edge and the output run in `chunk`
  // sub-blocks of it, so only the contraction's operand and result (c·len·N values each, 1/32 of a
  // pair at most) grow with the block.
  const int64_t rows = std::max(chunk, (n + kMinBlocks - 1) / kMinBlocks);
  for (int64_t s0 = 0; s0 < n; s0 += rows) {
    const int64_t len = std::min(rows, n - s0);
    // The block's left edge, channel-major: rows [c, len, N] (outgoing) | columns [c, N, len].
    // LN of the last sub-block stays in x_last for that sub-block's gate below.
    Variable ab, x_last;
    {
      Tensor abt;
      for (int64_t u0 = 0; u0 < len; u0 += chunk) {
        const int64_t ul = std::min(chunk, len - u0);
        const Variable x = layer_norm_input_.forward_for_gemm(Variable(block(z.value(), s0 + u0, ul)));
        if (u0 + ul == len) x_last = x;
        const Tensor a = edge(x, block(emask, s0 + u0, ul).unsqueeze(-1), left_gate_, left_projection_);
        if (!abt.defined()) {
          Shape shape{c, n, n};
          shape[axis + 1] = len;
          abt = Tensor::empty(shape, a.dtype(), a.device());
        }
        abt.narrow(axis + 1, u0, ul).copy_(a.permute({2, 0, 1}));
      }
      ab = Variable(abt);
    }
    // outgoing: t[q, i, j] = Σ_k a[q, i, k] b[q, j, k], i in the block  → [c, len, N]
    // incoming: t[q, i, j] = Σ_k b[q, k, i] a[q, k, j], j in the block  → [c, N, len]
    const Tensor tb = (outgoing_ ? autograd::matmul(ab, bv, false, true) : autograd::matmul(bv, ab, true, false)).value();
    ab = Variable();
    // Each temporary is dropped as soon as the next step has consumed it (at most three
    // sub-block-sized ones live at once beside x). The sub-blocks are independent (each reads and
    // writes only its own rows or columns of the stream), so they run last first: the last one's LN
    // is x_last, and a block of one sub-block (N ≤ 32·chunk) runs LN(z) once.
    const int64_t last0 = (len - 1) / chunk * chunk;
    for (int64_t u0 = last0; u0 >= 0; u0 -= chunk) {
      const int64_t ul = std::min(chunk, len - u0);
      const Variable x = u0 == last0 ? std::move(x_last)
                                     : layer_norm_input_.forward_for_gemm(Variable(block(z.value(), s0 + u0, ul)));  // [ul, N, c_z] | [N, ul, c_z]
      Variable t_ij(tb.narrow(axis + 1, u0, ul).permute({1, 2, 0}).contiguous());  // x's layout, c channels
      Variable ln = center_layer_norm_.forward(t_ij);
      t_ij = Variable();
      const Tensor o = output_projection_.forward(ln).value();
      ln = Variable();
      ops::sigmoid_gate_forward(gating_linear_.forward(x).value(), o, o);  // the update, in o's storage
      // Added by row sub-blocks: a column block of the stream (incoming) is strided, and add_into
      // stages a strided (or other-dtype) target through fp32 copies of its size. Sub-blocks of at
      // least N/kMinBlocks rows bound those to c·ul·N/32 values while keeping the calls few: with
      // `chunk` rows they were N/chunk calls of 4 kernels each per column sub-block, N²/chunk²
      // in all (0.95 million at N = 15,616), and the incoming update took 5× the outgoing one on
      // an H200 (docs/benchmarks.md, GPU run 4).
      const Tensor dst = into.narrow(axis, s0 + u0, ul);
      const int64_t add_rows = std::max(chunk, (dst.size(0) + kMinBlocks - 1) / kMinBlocks);
      for (int64_t r0 = 0; r0 < dst.size(0); r0 += add_rows) {
        const int64_t rl = std::min(add_rows, dst.size(0) - r0);
        add_into(dst.narrow(0, r0, rl), o.narrow(0, r0, rl));
      }
    }
  }
  return Variable(into);
}

void TriangleMultiplication::add_af2_params(Af2ParamTable& t, const std::string& key, int64_t idx) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(layer_norm_input_, t, key + "/layer_norm_input", idx);
  add_linear_af2_params(left_projection_, t, key + "/left_projection", idx);
  add_linear_af2_params(right_projection_, t, key + "/right_projection", idx);
  add_linear_af2_params(left_gate_, t, key + "/left_gate", idx);
  add_linear_af2_params(right_gate_, t, key + "/right_gate", idx);
  add_layer_norm_af2_params(center_layer_norm_, t, key + "/center_layer_norm", idx);
  add_linear_af2_params(output_projection_, t, key + "/output_projection", idx);
  add_linear_af2_params(gating_linear_, t, key + "/gating_linear", idx);
}

}  // namespace foldcore::af2
