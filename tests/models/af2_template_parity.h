// The template embedding's parity with the reference, shared by tests/models/test_af2_template.cpp
// (CPU) and test_af2_template_cuda.cpp (the same on a GPU).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "autograd/grad_mode.h"
#include "models/af2_test_util.h"
#include "models/alphafold/evoformer/embedders.h"
#include "models/alphafold/evoformer/template.h"
#include "test_util.h"

namespace foldcore::af2::template_test {

// Parity tolerance: the template path is embedding2d → 2 pair blocks (4 attention / triangle
// updates + transition each) → LN → attention, all fp32; each step's rounding differs from the
// reference by summation order (~1e-6 relative), compounding over ~12 steps to a few 1e-6 of
// the output scale. atol 1e-5·max|ref| + rtol 1e-4 leaves margin while a wrong feature order,
// mask, block order or attention scaling changes results at the 1e-1 level.
inline void expect_parity(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  FC_EXPECT_CLOSE(got, want, 1e-5 * max_abs(want), 1e-4);
  std::printf("max|diff| %.3g, max|ref| %.3g\n", testing::all_close(got, want, 0, 0).max_abs, max_abs(want));
}

// The input, recycling and template embeddings with the reference weights on `dev`, against the
// reference activations (evo_m template rows, evo_msa_mask, extra_z); with `add_into`, also
// inference's in-place template embedding in one and two passes (3 more template stack runs per
// template: minutes on the host emulation, so the CUDA test checks it at small widths instead).
inline void run_parity(Device dev, bool add_into = true) {
  Env e(dev);
  const Af2Config cfg;
  InputEmbedder input(e.scope("input"), cfg);
  RecyclingEmbedder recycling(e.scope("recycling"), cfg);
  TemplateEmbedder templ(e.scope("template"), cfg.c_z, cfg.templates);
  TemplateAngleEmbedder angles(e.scope("angles"), cfg.c_m);
  e.ps.finalize();
  Af2ParamTable table;
  input.add_af2_params(table, "evoformer");
  recycling.add_af2_params(table, "evoformer");
  templ.add_af2_params(table, "evoformer");
  angles.add_af2_params(table, "evoformer");
  // embedding2d 2, output LN 2, attention 5 (no gating), per block: 2 tri att × 10, 2 tri mul × 16,
  // transition 6.
  const size_t n_template = 2 + 2 + 5 + 2 * (2 * 10 + 2 * 16 + 6);
  EXPECT_EQ(table.size(), 16u + n_template + 4);  // + input 10, recycling 6; angles 4
  load_af2_params(table, testing::shared_dir() + "/af2/ref/params.npz", {.allow_unused = true});

  autograd::NoGradGuard ng;
  const int64_t r = 1;
  auto on = [&](const Tensor& t) { return t.to(dev); };
  const Device cpu = Device::cpu();
  // Template angle rows and their mask (evo_m / evo_msa_mask rows S..S+T).
  const Tensor af = template_angle_feat(feat("template_aatype", r), feat("template_torsion_angles_sin_cos", r),
                                        feat("template_alt_torsion_angles_sin_cos", r),
                                        feat("template_torsion_angles_mask", r));
  const Tensor rows = angles.forward(Variable(on(af))).value().to(cpu);
  const int64_t s = feat("msa_feat", r).size(0), nt = rows.size(0);
  expect_parity(rows, ref("modules", "evo_m").narrow(0, s, nt).contiguous());
  FC_EXPECT_CLOSE(template_msa_mask(feat("template_torsion_angles_mask", r)),
                  ref("modules", "evo_msa_mask").narrow(0, s, nt).contiguous(), 0, 0);

  // Pair entering the extra-MSA stack: input embedding + recycling + templates.
  MsaPair m = input.forward(Variable(on(feat("target_feat", r))), Variable(on(feat("msa_feat", r))),
                            on(feat("residue_index", r)));
  m = recycling.apply(m, Variable(on(ref("outputs", "recycle_m1").select(0, r - 1).contiguous())),
                      Variable(on(ref("outputs", "recycle_z").select(0, r - 1).contiguous())),
                      on(pseudo_beta(feat("aatype", r), ref("outputs", "recycle_x").select(0, r - 1).contiguous())));
  TemplateInputs in;
  in.aatype = on(feat("template_aatype", r));
  in.all_atom_positions = on(feat("template_all_atom_positions", r));
  in.all_atom_mask = on(feat("template_all_atom_mask", r));
  in.pseudo_beta = on(feat("template_pseudo_beta", r));
  in.pseudo_beta_mask = on(feat("template_pseudo_beta_mask", r));
  in.template_mask = on(feat("template_mask", r));
  const Tensor seq_mask = feat("seq_mask", r);
  const int64_t n = seq_mask.numel();
  const auto sm = seq_mask.to_vector();
  std::vector<float> pm(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) pm[i * n + j] = sm[i] * sm[j];
  const Tensor pair_mask = Tensor::from_vector(pm, {n, n}, DType::f32, dev);
  const Variable z = autograd::add(m.pair, templ.forward(m.pair, in, pair_mask));
  ASSERT_TRUE(z.device() == dev);
  expect_parity(z.value().to(cpu), ref("modules", "extra_z"));
  // Inference's in-place template embedding, in one and in two passes over the templates, chunked.
  for (const TemplatePasses passes : {TemplatePasses::one, TemplatePasses::two}) {
    if (!add_into) break;
    Tensor zi = m.pair.value().clone();
    templ.add_into(m.pair, in, pair_mask, 5, zi, passes);
    expect_parity(zi.to(cpu), ref("modules", "extra_z"));
  }
  // The feature pipeline's template pseudo-β agrees with ours from the template atoms (so the
  // embedder may be called without it).
  FC_EXPECT_CLOSE(pseudo_beta(in.aatype, in.all_atom_positions).to(cpu), in.pseudo_beta.to(cpu), 0, 0);
  FC_EXPECT_CLOSE(pseudo_beta_mask(in.aatype, in.all_atom_mask).to(cpu), in.pseudo_beta_mask.to(cpu), 0, 0);
}

}  // namespace foldcore::af2::template_test
