// GEMM Functions: linear (bias + activation epilogue) and batched matmul, with bf16 autocast.
//
// linear: y = act(p), p = x·W + b, x [R, in], W [in, out].
//   dp = act'(p) ⊙ dy;  dx = dp·Wᵀ;  dW += xᵀ·dp;  db += Σ_r dp.
// Under autocast x, W, b are cast to bf16 on the fly (W is the fp32 master in the ParamStore);
// dW is accumulated straight into the fp32 master gradient by a mixed GEMM (bf16 operands, fp32
// out), db is reduced in fp32 directly.
// A parameter's cast is made once per ParamCastScope (param_cast_cache.h), not at every use.
#include <optional>

#include "autograd/function_util.h"
#include "autograd/functions.h"
#include "autograd/param_cast_cache.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/layernorm.h"
#include "kernels/reduce.h"

namespace foldcore::autograd {
namespace {

struct LinearFn final : Function {
  Tensor x2;    // [R, in] in the compute dtype; saved only when W needs a gradient
  int64_t rows = 0, n_in = 0;
  Tensor w;     // [in, out] in the compute dtype
  Tensor act_in;  // relu: the output y; gelu: the pre-activation p
  ops::Activation act = ops::Activation::none;
  DType cd = DType::f32;

  void backward(BackwardCtx& ctx) override {
    const int64_t n_out = w.size(1);
    Tensor dp = ctx.grad_output(0).view({rows, n_out});
    bool bias_done = false;
    if (act != ops::Activation::none) {
      Tensor t = Tensor::empty({rows, n_out}, cd, dp.device());
      if (ctx.needs_grad(2)) {
        // dp and the bias gradient Σ_r dp in one pass (relu'(p) = [y > 0]).
        ops::activation_backward_sum_rows(act, act_in, dp, t, ctx.accumulate_grad(2, DType::f32));
        bias_done = true;
      } else if (act == ops::Activation::relu) {
        ops::relu_backward(act_in, dp, t);  // relu'(p) = [y > 0]
      } else {
        ops::gelu_backward(act_in, dp, t);
      }
      dp = t;
    }
    if (ctx.needs_grad(0)) {
      // dx in fp32 where x takes it (an fp32 x, or a 16-bit LayerNorm output: grad_dtype): the
      // GEMM's fp32 accumulator written as it is, not rounded to 16 bits and converted back; added
      // by the GEMM (beta = 1) into x's gradient so far where there is one in that dtype. As the
      // lone consumer of a LayerNorm output of a 16-bit x, in x's 16-bit dtype (rounded once by
      // the GEMM: half the bytes written and read; sole_consumer_of_narrow_output).
      DType dx_dtype = ctx.grad_dtype(0, DType::f32);
      if (dx_dtype == DType::f32 && cd != DType::f32 && ctx.sole_consumer_of_narrow_output(0)) dx_dtype = cd;
      bool add = false;
      const Tensor dx = detail::grad_to_add_or_new(ctx, 0, dx_dtype, add);
      ops::GemmArgs g;
      g.trans_b = true;
      g.beta = add ? 1.f : 0.f;
      ops::gemm(dp, w, dx.view({rows, n_in}), g);
    }
    if (ctx.needs_grad(1)) {
      // Into the weight's own gradient (the fp32 master's, in place): under bf16 autocast a mixed
      // product, bf16 operands with fp32 accumulation and an fp32 out, so dW is not rounded to bf16
      // and needs no temporary, zero fill, conversion or separate add.
      ops::GemmArgs g;
      g.trans_a = true;
      g.beta = 1.f;
      ops::gemm(x2, dp, ctx.accumulate_grad(1), g);
    }
    if (ctx.needs_grad(2) && !bias_done) ops::sum_rows_accumulate(dp, ctx.accumulate_grad(2, DType::f32));
  }
};

// linears: projections i = 0..n-1 of one x, y_i = x·W_i + b_i, outputs back to back in one buffer;
// runs [first, first + count) of equal width share one strided-batch GEMM.
struct ProjectionRun {
  int first = 0, count = 0;
};

thread_local LinearsStats t_linears_stats;

struct LinearsFn final : Function {
  Tensor x2;                   // [R, in] compute dtype; saved only when a weight needs a gradient
  std::vector<Tensor> w;       // [in, out_i] compute dtype (views of the runs' stacks)
  std::vector<int64_t> outs;   // out_i
  std::vector<int> bias_input;  // input index of b_i, or -1
  std::vector<ProjectionRun> runs;
  int64_t rows = 0, n_in = 0;
  DType cd = DType::f32;

  static int w_input(int i) { return 1 + i; }

  // The gradient destinations of a run's inputs input_of(first + j) (undefined where a projection
  // has no such input, -1, or it needs no gradient), asked for once; back_to_back: every one of
  // them fp32 and contiguous in one buffer, `elems` after the one before, over packed output
  // gradients, so one batched op serves the run.
  struct RunGrads {
    std::vector<Tensor> grads;
    bool back_to_back = false;
  };
  template <typename InputOf>
  static RunGrads run_grads(BackwardCtx& ctx, const ProjectionRun& r, bool is_packed, int64_t elems, InputOf input_of,
                            std::optional<DType> dtype) {
    RunGrads rg;
    rg.grads.resize(static_cast<size_t>(r.count));
    bool all = true;
    for (int j = 0; j < r.count; ++j) {
      const int in = input_of(r.first + j);
      if (in >= 0 && ctx.needs_grad(in)) rg.grads[static_cast<size_t>(j)] = ctx.accumulate_grad(in, dtype);
      else all = false;
    }
    rg.back_to_back = is_packed && r.count > 1 && all;
    for (size_t j = 0; rg.back_to_back && j < rg.grads.size(); ++j) {
      const Tensor& gj = rg.grads[j];
      rg.back_to_back = gj.dtype() == DType::f32 && gj.is_contiguous() && gj.storage() == rg.grads[0].storage() &&
                        gj.offset() == rg.grads[0].offset() + static_cast<int64_t>(j) * elems;
    }
    return rg;
  }

  void backward(BackwardCtx& ctx) override {
    const int n = static_cast<int>(outs.size());
    // The gradients as one buffer when the engine packed them (it does unless an output was a
    // root or they could not share one): a run is then a [count, R, out] strided batch.
    const Tensor& packed = ctx.packed_grad_outputs();
    std::vector<int64_t> offset(static_cast<size_t>(n) + 1, 0);
    for (int i = 0; i < n; ++i) offset[i + 1] = offset[i] + rows * outs[i];
    bool is_packed = packed.defined() && packed.dtype() == cd && packed.numel() == offset[n];
    for (int i = 0; is_packed && i < n; ++i)
      is_packed = ctx.grad_output(i).data_ptr() == packed.narrow(0, offset[i], 1).data_ptr();
    auto dy = [&](int i) { return ctx.grad_output(i).view({rows, outs[i]}); };

    bool biases_done = false;
    // dx = Σ_i dy_i·W_iᵀ, accumulated by the GEMMs in fp32 (16-bit operands, fp32 out); handed on
    // in fp32 where x takes it (grad_dtype: a LayerNorm's 16-bit output does), else converted. As
    // the lone consumer of a LayerNorm output of a 16-bit x (sole_consumer_of_narrow_output), in
    // x's 16-bit dtype: the fp32 sum rounded once by gemm_sum_nt (half the bytes written and read),
    // as `linear` does.
    if (ctx.needs_grad(0)) {
      const bool sums = n <= ops::kGemmSumMaxPairs && cd != DType::f32;
      const DType dx_dtype = sums && ctx.sole_consumer_of_narrow_output(0) ? cd : DType::f32;
      // Into x's gradient so far where there is one (another consumer's: beta = 1 throughout).
      bool add = false;
      const Tensor dx = detail::grad_to_add_or_new(ctx, 0, dx_dtype, add).view({rows, n_in});
      if (n > 1 && sums) {
        // One product over the projections' concatenated K (ops::gemm_sum_nt: on CUDA one kernel
        // that reads and writes dx once; on the CPU the same per-projection products as below),
        // which also makes the bias gradients db_i += Σ_r dy_i from the dy_i it reads (on CUDA
        // without reading them again; elsewhere the column sums below, one per bias).
        std::vector<Tensor> dys, ws, dbs(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          dys.push_back(dy(i));
          ws.push_back(w[i]);
          const int bi = bias_input[static_cast<size_t>(i)];
          if (bi >= 0 && ctx.needs_grad(bi)) dbs[static_cast<size_t>(i)] = ctx.accumulate_grad(bi, DType::f32);
        }
        ops::gemm_sum_nt(dys, ws, dx, add ? 1.f : 0.f, dbs);
        biases_done = true;
        ++t_linears_stats.bias_grads_with_dx;
      } else {  // one product, or fp32 sums of the products (a 16-bit dx here is one product, rounded once)
        for (int i = 0; i < n; ++i) {
          ops::GemmArgs g;
          g.trans_b = true;
          g.beta = i == 0 && !add ? 0.f : 1.f;
          ops::gemm(dy(i), w[i], dx, g);
        }
      }
    }
    // dW_i += xᵀ·dy_i into the fp32 master gradients.
    for (const ProjectionRun& r : runs) {
      const int64_t out = outs[r.first];
      const RunGrads rg = run_grads(ctx, r, is_packed, n_in * out, [](int i) { return w_input(i); }, std::nullopt);
      ops::GemmArgs g;
      g.trans_a = true;
      g.beta = 1.f;
      if (rg.back_to_back) {  // the run's weights lie back to back in the flat gradient buffer: one batched GEMM
        const Tensor dys = packed.narrow(0, offset[r.first], r.count * rows * out).view({r.count, rows, out});
        // The run's gradients as one [count, in, out] tensor over grads[0]'s buffer (kept alive by it).
        ops::gemm(x2, dys, Tensor::wrap(rg.grads[0].data_ptr(), {r.count, n_in, out}, DType::f32, rg.grads[0].device()), g);
        ++t_linears_stats.batched_weight_grads;
        continue;
      }
      for (int j = 0; j < r.count; ++j)
        if (rg.grads[static_cast<size_t>(j)].defined()) ops::gemm(x2, dy(r.first + j), rg.grads[static_cast<size_t>(j)], g);
    }
    // db_i += Σ_r dy_i (unless gemm_sum_nt made them above): a run whose bias gradients lie back to
    // back (ParamStore::place_together) over packed gradients is one batched column sum, else one
    // per projection.
    if (biases_done) return;
    for (const ProjectionRun& r : runs) {
      const int64_t out = outs[r.first];
      const RunGrads rg = run_grads(ctx, r, is_packed, out, [this](int i) { return bias_input[i]; }, DType::f32);
      if (rg.back_to_back) {
        const Tensor dys = packed.narrow(0, offset[r.first], r.count * rows * out).view({r.count, rows, out});
        ops::sum_rows_accumulate_batched(dys, Tensor::wrap(rg.grads[0].data_ptr(), {r.count, out}, DType::f32, rg.grads[0].device()));
        ++t_linears_stats.batched_bias_grads;
        continue;
      }
      for (int j = 0; j < r.count; ++j)
        if (rg.grads[static_cast<size_t>(j)].defined()) ops::sum_rows_accumulate(dy(r.first + j), rg.grads[static_cast<size_t>(j)]);
    }
  }
};

// Σ of a batched gradient [batch…, r, c] over its batch dims when the operand was 2-D.
Tensor reduce_batch(const Tensor& g, int target_dim) {
  if (g.dim() == target_dim) return g;
  std::vector<int> axes;
  for (int i = 0; i < g.dim() - target_dim; ++i) axes.push_back(i);
  Tensor out = Tensor::empty({g.size(-2), g.size(-1)}, g.dtype(), g.device());
  ops::sum(g, axes, out);
  return out;
}

struct MatmulFn final : Function {
  Tensor a, b;  // compute dtype, contiguous
  bool ta = false, tb = false;
  DType cd = DType::f32;

  void backward(BackwardCtx& ctx) override {
    const Tensor& dc = ctx.grad_output(0);
    // C = op(A)·op(B):  d op(A) = dC·op(B)ᵀ,  d op(B) = op(A)ᵀ·dC.
    if (ctx.needs_grad(0)) {
      ops::GemmArgs g;
      Tensor da;
      Shape s = dc.shape();
      s[s.size() - 2] = a.size(-2);
      s[s.size() - 1] = a.size(-1);
      da = Tensor::empty(s, cd, dc.device());
      if (!ta) {
        g.trans_b = !tb;
        ops::gemm(dc, b, da, g);  // dA = dC·op(B)ᵀ
      } else {
        g.trans_a = tb;
        g.trans_b = true;
        ops::gemm(b, dc, da, g);  // dA = op(B)·dCᵀ
      }
      ctx.put_grad(0, reduce_batch(da, a.dim()));
    }
    if (ctx.needs_grad(1)) {
      ops::GemmArgs g;
      Shape s = dc.shape();
      s[s.size() - 2] = b.size(-2);
      s[s.size() - 1] = b.size(-1);
      Tensor db = Tensor::empty(s, cd, dc.device());
      if (!tb) {
        g.trans_a = !ta;
        ops::gemm(a, dc, db, g);  // dB = op(A)ᵀ·dC
      } else {
        g.trans_a = true;
        g.trans_b = ta;
        ops::gemm(dc, a, db, g);  // dB = dCᵀ·op(A)
      }
      ctx.put_grad(1, reduce_batch(db, b.dim()));
    }
  }
};

// outer_product_project: y [I, J, Z] = outer·W_ec + bias with outer [I, J, E, C] (outer[i, j, e, c] =
// Σ_s a[s, i, c]·b[s, j, e]) and W_ec W's rows in (e, c) order. Saved in the GEMM dtype: a [S, I, C],
// b [S, J, E], W as given ([C·E, Z], rows in (c, e) order) and the outer products (W's gradient only).
// The outer products' gradient is made as [(i, c), (e, j)] by one strided-batch GEMM (per i: W·dy_iᵀ),
// the layout in which both operands' gradients are one GEMM each, so it is never transposed; b and
// b's gradient are turned to [S, E, J] instead (J·E per MSA row: 1/N of the outer products' size).
struct OuterProductProjectFn final : Function {
  Tensor a, b, w, outer;
  DType cd = DType::f32, a_dtype = DType::f32, b_dtype = DType::f32;

  void backward(BackwardCtx& ctx) override {
    const int64_t s = a.size(0), ni = a.size(1), c = a.size(2), nj = b.size(1), e = b.size(2), z = w.size(1);
    const Tensor g = ctx.grad_output(0).contiguous().view({ni * nj, z});
    const Tensor dy = g.to(cd);
    if (ctx.needs_grad(3)) ops::sum_rows_accumulate(g, ctx.accumulate_grad(3, DType::f32));
    if (ctx.needs_grad(2)) {  // dW_ec = outerᵀ·dy (fp32), added into W's gradient in its (c, e) order
      const Tensor dw_ec = Tensor::empty({e * c, z}, DType::f32, g.device());
      ops::GemmArgs gw;
      gw.trans_a = true;
      ops::gemm(outer.view({ni * nj, e * c}), dy, dw_ec, gw);
      const Tensor acc = ctx.accumulate_grad(2, DType::f32).view({c, e, z});
      ops::add(acc, dw_ec.view({e, c, z}).permute({1, 0, 2}), acc);
    }
    if (!ctx.needs_grad(0) && !ctx.needs_grad(1)) return;
    // d[i, (c, e), j] = Σ_z W[(c, e), z]·dy[i, j, z]: the outer products' gradient as [(i, c), (e, j)].
    const Tensor d = Tensor::empty({ni, c * e, nj}, cd, g.device());
    ops::GemmArgs gd;
    gd.trans_b = true;
    ops::gemm(w, dy.view({ni, nj, z}), d, gd);
    const Tensor d2 = d.view({ni * c, e * nj});
    if (ctx.needs_grad(0)) {  // da[s, (i, c)] = Σ_(e, j) b[s, j, e]·d[(i, c), (e, j)]
      const Tensor b_ej = b.permute({0, 2, 1}).contiguous();
      Tensor da = Tensor::empty({s, ni, c}, a_dtype, g.device());
      ops::GemmArgs ga;
      ga.trans_b = true;
      ops::gemm(b_ej.view({s, e * nj}), d2, da.view({s, ni * c}), ga);
      ctx.put_grad(0, da);
    }
    if (ctx.needs_grad(1)) {  // db[s, j, e] = Σ_(i, c) a[s, (i, c)]·d[(i, c), (e, j)], made as [s, e, j]
      Tensor db_ej = Tensor::empty({s, e, nj}, b_dtype, g.device());
      ops::gemm(a.view({s, ni * c}), d2, db_ej.view({s, e * nj}));
      ctx.put_grad(1, db_ej.permute({0, 2, 1}).contiguous());
    }
  }
};

// Inputs: 0 x, 1 gamma, 2 beta, 3 w. Saves x, the statistics, the f32 gamma and beta (y is made
// again in the backward) and w's GEMM-dtype copy.
struct LayerNormProjectHeadsFn final : Function {
  Tensor x, gamma, beta, mean, rstd, w;
  float eps = 1e-5f;
  void backward(BackwardCtx& ctx) override {
    bool add = false;
    const Tensor dx = detail::grad_to_add_or_scratch(ctx, 0, x, x.dtype(), add);
    const Tensor dgamma = detail::acc_grad_or_scratch(ctx, 1, gamma, DType::f32);
    const Tensor dbeta = detail::acc_grad_or_scratch(ctx, 2, gamma, DType::f32);
    const Tensor dw = detail::acc_grad_or_scratch(ctx, 3, w, DType::f32);
    ops::layernorm_project_heads_backward(ctx.grad_output(0), x, gamma, beta, eps, mean, rstd, w, dx, dgamma, dbeta,
                                          dw, add);
  }
};

}  // namespace

Variable linear(const Variable& x, const Variable& w, const Variable& b, ops::Activation act) {
  FC_CHECK(w.dim() == 2 && x.size(-1) == w.size(0), "linear: x ", x.shape().str(), " · w ", w.shape().str(),
           " (w must be [in, out])");
  FC_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(1)), "linear: bias ",
           b.defined() ? b.shape().str() : "", " for w ", w.shape().str());
  const DType cd = detail::gemm_dtype(x.dtype());
  const int64_t n_in = w.size(0), n_out = w.size(1), rows = x.numel() / n_in;
  const Tensor x2 = x.value().to(cd).reshape({rows, n_in});
  const Tensor wc = cast_param(w, cd);  // a parameter's cast made once per ParamCastScope
  const bool rg = any_requires_grad({x, w, b});
  Tensor y = Tensor::empty({rows, n_out}, cd, x.device());
  ops::GemmArgs g;
  if (b.defined()) g.bias = cast_param(b, cd);
  g.act = act;
  if (rg && act == ops::Activation::gelu) g.pre_act = Tensor::empty({rows, n_out}, cd, x.device());
  ops::gemm(x2, wc, y, g);
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = n_out;
  if (!rg) return Variable(y.view(out_shape));
  auto fn = std::make_unique<LinearFn>();
  if (w.requires_grad()) fn->x2 = x2;
  fn->rows = rows;
  fn->n_in = n_in;
  fn->w = wc;
  fn->act = act;
  fn->act_in = act == ops::Activation::gelu ? g.pre_act : (act == ops::Activation::relu ? y : Tensor());
  fn->cd = cd;
  return record1("linear", std::move(fn), {x, w, b}, y.view(out_shape));
}

std::vector<Variable> linears(const Variable& x, const std::vector<Variable>& ws, const std::vector<Variable>& bs,
                              const std::vector<Shape>& shapes) {
  const int n = static_cast<int>(ws.size());
  FC_CHECK(n > 0 && (bs.empty() || static_cast<int>(bs.size()) == n) &&
               (shapes.empty() || static_cast<int>(shapes.size()) == n),
           "linears: ", n, " weights, ", bs.size(), " biases, ", shapes.size(), " shapes");
  const int64_t n_in = x.size(-1), rows = x.numel() / std::max<int64_t>(n_in, 1);
  auto bias = [&](int i) { return bs.empty() ? Variable() : bs[static_cast<size_t>(i)]; };
  std::vector<int64_t> outs;
  for (int i = 0; i < n; ++i) {
    const Variable& w = ws[static_cast<size_t>(i)];
    FC_CHECK(w.dim() == 2 && w.size(0) == n_in && w.device() == x.device(), "linears: x ", x.shape().str(), " · w ",
             w.shape().str(), " (w must be [in, out] on x's device)");
    const Variable b = bias(i);
    FC_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(1)), "linears: bias ",
             b.defined() ? b.shape().str() : "", " for w ", w.shape().str());
    outs.push_back(w.size(1));
    if (!shapes.empty())
      FC_CHECK(shapes[static_cast<size_t>(i)].product() == rows * w.size(1), "linears: output ", i, " shaped ",
               shapes[static_cast<size_t>(i)].str(), " for ", rows, " × ", w.size(1), " values");
  }
  const DType cd = detail::gemm_dtype(x.dtype());
  const Tensor x2 = x.value().to(cd).reshape({rows, n_in});  // the one cast of x
  std::vector<ProjectionRun> runs;
  for (int i = 0; i < n; ++i) {
    if (runs.empty() || outs[static_cast<size_t>(runs.back().first)] != outs[static_cast<size_t>(i)]) runs.push_back({i, 0});
    ++runs.back().count;
  }
  int64_t total = 0;
  for (int64_t o : outs) total += rows * o;
  const Tensor y = Tensor::empty({total}, cd, x.device());
  std::vector<Tensor> wc(static_cast<size_t>(n));
  int64_t off = 0;
  for (const ProjectionRun& r : runs) {
    const int64_t out = outs[static_cast<size_t>(r.first)];
    std::vector<Variable> rw(ws.begin() + r.first, ws.begin() + r.first + r.count), rb;
    bool any_bias = false;
    for (int i = r.first; i < r.first + r.count; ++i) {
      rb.push_back(bias(i));
      any_bias = any_bias || bias(i).defined();
    }
    ops::GemmArgs g;
    Tensor yr;
    if (r.count == 1) {  // a projection of its own width: a plain GEMM, the parameters' casts cached
      wc[static_cast<size_t>(r.first)] = cast_param(rw[0], cd);
      if (any_bias) g.bias = cast_param(rb[0], cd);
      yr = y.narrow(0, off, rows * out).view({rows, out});
      ops::gemm(x2, wc[static_cast<size_t>(r.first)], yr, g);
    } else {  // y[j] = x·W[j] + b[j]: x shared by the batch, the weights and biases stacked
      const Tensor wst = stack_params(rw, {n_in, out}, cd, x.device());
      for (int j = 0; j < r.count; ++j) wc[static_cast<size_t>(r.first + j)] = wst.select(0, j);
      if (any_bias) g.bias = stack_params(rb, {out}, cd, x.device());
      yr = y.narrow(0, off, r.count * rows * out).view({r.count, rows, out});
      ops::gemm(x2, wst, yr, g);
      ++t_linears_stats.batched_runs;
    }
    off += r.count * rows * out;
  }
  std::vector<Tensor> outputs;
  off = 0;
  for (int i = 0; i < n; ++i) {
    Shape s = x.shape();
    s[s.size() - 1] = outs[static_cast<size_t>(i)];
    outputs.push_back(y.narrow(0, off, rows * outs[static_cast<size_t>(i)]).view(shapes.empty() ? s : shapes[static_cast<size_t>(i)]));
    off += rows * outs[static_cast<size_t>(i)];
  }
  std::vector<Variable> inputs{x};
  for (const Variable& w : ws) inputs.push_back(w);
  auto fn = std::make_unique<LinearsFn>();
  for (int i = 0; i < n; ++i) {
    fn->bias_input.push_back(bias(i).defined() ? static_cast<int>(inputs.size()) : -1);
    if (bias(i).defined()) inputs.push_back(bias(i));
  }
  if (!any_requires_grad(inputs)) {
    std::vector<Variable> plain;
    for (const Tensor& t : outputs) plain.emplace_back(t);
    return plain;
  }
  bool weight_grad = false;
  for (const Variable& w : ws) weight_grad = weight_grad || w.requires_grad();
  if (weight_grad) fn->x2 = x2;
  fn->w = std::move(wc);
  fn->outs = outs;
  fn->runs = std::move(runs);
  fn->rows = rows;
  fn->n_in = n_in;
  fn->cd = cd;
  std::vector<Variable> result = record("linears", std::move(fn), inputs, outputs);
  result[0].node()->packed_output_grads = true;
  return result;
}

LinearsStats linears_stats() { return t_linears_stats; }

Variable outer_product_project(const Variable& a, const Variable& b, const Variable& w, const Variable& bias) {
  FC_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.device() == b.device(),
           "outer_product_project: a ", a.shape().str(), " and b ", b.shape().str(),
           " must be [S, I, C] and [S, J, E] on one device");
  const int64_t c = a.size(2), e = b.size(2);
  FC_CHECK(w.dim() == 2 && w.size(0) == c * e && w.device() == a.device(), "outer_product_project: w ",
           w.shape().str(), " for ", c, " × ", e, " channels (w must be [C·E, Z] on a's device)");
  FC_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(1)), "outer_product_project: bias ",
           bias.defined() ? bias.shape().str() : "", " for w ", w.shape().str());
  const DType cd = detail::gemm_dtype(a.dtype());
  const Tensor av = a.value().to(cd).contiguous(), bv = b.value().to(cd).contiguous();
  const int64_t s = av.size(0), ni = av.size(1), nj = bv.size(1), z = w.size(1);
  // Per i: outer_i[(j, e), c] = b[s, (j, e)]ᵀ·a[s, i, c]; a_i is a strided batch over i of av.
  const Tensor outer = Tensor::empty({ni, nj, e, c}, cd, av.device());
  ops::GemmArgs go;
  go.trans_a = true;
  ops::gemm(bv.view({s, nj * e}), av.permute({1, 0, 2}), outer.view({ni, nj * e, c}), go);
  const Tensor wc = cast_param(w, cd);  // [(c, e), Z]; its rows in the outer products' (e, c) order:
  const Tensor w_ec = wc.view({c, e, z}).permute({1, 0, 2}).contiguous().view({e * c, z});
  const Tensor y = Tensor::empty({ni, nj, z}, cd, av.device());
  ops::GemmArgs gy;
  if (bias.defined()) gy.bias = cast_param(bias, cd);
  ops::gemm(outer.view({ni * nj, e * c}), w_ec, y.view({ni * nj, z}), gy);
  if (!any_requires_grad({a, b, w, bias})) return Variable(y);
  auto fn = std::make_unique<OuterProductProjectFn>();
  fn->a = av;
  fn->b = bv;
  fn->w = wc;
  if (w.requires_grad()) fn->outer = outer;
  fn->cd = cd;
  // The operands' gradients in their own dtypes where a GEMM can write them (fp32 or the GEMM dtype).
  fn->a_dtype = a.dtype() == DType::f32 ? DType::f32 : cd;
  fn->b_dtype = b.dtype() == DType::f32 ? DType::f32 : cd;
  return record1("outer_product_project", std::move(fn), {a, b, w, bias}, y);
}

Variable layer_norm_project_heads(const Variable& x, const Variable& gamma, const Variable& beta, const Variable& w,
                                  float eps) {
  const int64_t c = x.size(-1);
  FC_CHECK(x.dim() >= 2 && gamma.shape() == Shape({c}) && beta.shape() == Shape({c}) && w.dim() == 2 && w.size(0) == c,
           "layer_norm_project_heads: x ", x.shape().str(), ", gamma ", gamma.shape().str(), ", beta ",
           beta.shape().str(), ", w ", w.shape().str(), " (expected [rows..., C], [C], [C], [C, H])");
  const Tensor xv = x.value().contiguous();
  const Tensor gv = gamma.value().to(DType::f32), bv = beta.value().to(DType::f32);
  const Tensor wc = cast_param(w, detail::gemm_dtype(x.dtype()));  // linear(LN(x))'s GEMM dtype
  const Tensor out = Tensor::empty(ops::layernorm_project_heads_out_shape(xv.shape(), w.size(1)), wc.dtype(), xv.device());
  const Tensor mean = Tensor::empty({xv.numel() / c}, DType::f32, xv.device());
  const Tensor rstd = Tensor::empty({xv.numel() / c}, DType::f32, xv.device());
  ops::layernorm_project_heads_forward(xv, gv, bv, eps, wc, out, mean, rstd);
  if (!any_requires_grad({x, gamma, beta, w})) return Variable(out);
  auto fn = std::make_unique<LayerNormProjectHeadsFn>();
  fn->x = xv;
  fn->gamma = gv;
  fn->beta = bv;
  fn->mean = mean;
  fn->rstd = rstd;
  fn->w = wc;
  fn->eps = eps;
  Variable result = record1("layer_norm_project_heads", std::move(fn), {x, gamma, beta, w}, out);
  // A 16-bit output's gradient is read in fp32 as it comes (an attention's fp32 bias gradient),
  // with no conversion pass.
  if (result.node() && out.dtype() != DType::f32) result.node()->f32_output_grads = true;
  return result;
}

Variable matmul(const Variable& a, const Variable& b, bool trans_a, bool trans_b) {
  FC_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: operands ", a.shape().str(), " and ", b.shape().str(),
           " must be at least 2-D");
  FC_CHECK(a.dim() == b.dim() || a.dim() == 2 || b.dim() == 2, "matmul: batch dims of ", a.shape().str(), " and ",
           b.shape().str(), " differ");
  const DType cd = detail::gemm_dtype(a.dtype());
  const Tensor av = a.value().to(cd).contiguous(), bv = b.value().to(cd).contiguous();
  const int64_t m = trans_a ? av.size(-1) : av.size(-2);
  const int64_t ka = trans_a ? av.size(-2) : av.size(-1);
  const int64_t kb = trans_b ? bv.size(-1) : bv.size(-2);
  const int64_t n = trans_b ? bv.size(-2) : bv.size(-1);
  FC_CHECK(ka == kb, "matmul: inner dims differ: ", a.shape().str(), (trans_a ? "ᵀ" : ""), " · ", b.shape().str(),
           (trans_b ? "ᵀ" : ""));
  Shape s = a.dim() >= b.dim() ? av.shape() : bv.shape();
  s[s.size() - 2] = m;
  s[s.size() - 1] = n;
  Tensor c = Tensor::empty(s, cd, av.device());
  ops::GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  ops::gemm(av, bv, c, g);
  if (!any_requires_grad({a, b})) return Variable(c);
  auto fn = std::make_unique<MatmulFn>();
  fn->a = av;
  fn->b = bv;
  fn->ta = trans_a;
  fn->tb = trans_b;
  fn->cd = cd;
  return record1("matmul", std::move(fn), {a, b}, c);
}

}  // namespace foldcore::autograd
