#include "models/bert/bert_model.h"

#include <algorithm>
#include <string>

#include "core/random.h"

namespace foldcore::bert {
namespace {

using namespace autograd;

nn::LinearOptions bert_linear(ops::Activation act = ops::Activation::none) {
  nn::LinearOptions o;
  o.init = nn::Init::bert;
  o.act = act;
  return o;
}

std::vector<int32_t> host_i32(const Tensor& t) {
  const std::vector<int64_t> v = t.to_vector_i64();
  return {v.begin(), v.end()};
}

Tensor i32_tensor(const std::vector<int32_t>& v, Device device) {
  return Tensor::from_vector_i64(std::vector<int64_t>(v.begin(), v.end()), {static_cast<int64_t>(v.size())},
                                 DType::i32, device);
}

// tanh(x) = 2·σ(2x) − 1: the core has no tanh op, and this identity is exact in real arithmetic
// (and well conditioned: σ saturates where tanh does).
Variable tanh_via_sigmoid(const Variable& x) {
  const Variable minus_one(Tensor::full({1}, -1.0, DType::f32, x.device()));
  return add(scale(sigmoid(scale(x, 2.f)), 2.f), minus_one);
}

// Row-wise argmax of [rows, C] logits (host) compared with the labels.
int64_t count_argmax_hits(const Variable& logits, const Tensor& labels) {
  const std::vector<float> l = logits.value().to(DType::f32).to_vector();
  const std::vector<int64_t> y = labels.to_vector_i64();
  const int64_t c = logits.size(1);
  int64_t hits = 0;
  for (size_t r = 0; r < y.size(); ++r) {
    const auto row = l.begin() + static_cast<std::ptrdiff_t>(r) * c;
    hits += (std::max_element(row, row + c) - row) == y[r] ? 1 : 0;
  }
  return hits;
}

}  // namespace

void check_batch(const BertBatch& b, const BertModelConfig& c) {
  FC_CHECK(b.input_ids.defined() && b.input_ids.dim() == 2, "bert: input_ids must be [B, L], got ",
           b.input_ids.defined() ? b.input_ids.shape().str() : std::string("undefined"));
  const Shape bl = b.input_ids.shape();
  for (const Tensor* t : {&b.segment_ids, &b.position_ids, &b.input_mask})
    FC_CHECK(t->defined() && t->shape() == bl, "bert: segment/position ids and input_mask must be ", bl.str(),
             ", got ", t->defined() ? t->shape().str() : std::string("undefined"));
  FC_CHECK(bl[1] <= c.max_positions, "bert: sequence length ", bl[1], " exceeds max_positions ", c.max_positions);
  FC_CHECK(b.masked_lm_positions.defined() && b.masked_lm_positions.dim() == 2 &&
               b.masked_lm_positions.size(0) == bl[0] && b.masked_lm_ids.shape() == b.masked_lm_positions.shape() &&
               b.masked_lm_weights.shape() == b.masked_lm_positions.shape(),
           "bert: masked_lm_positions/ids/weights must all be [B, P] with B = ", bl[0]);
  FC_CHECK(b.nsp_positions.defined() && b.nsp_labels.defined() && b.nsp_positions.dim() == 1 &&
               b.nsp_labels.shape() == b.nsp_positions.shape() && b.nsp_positions.numel() > 0,
           "bert: nsp_positions and nsp_labels must be non-empty [S] of the same size");
  FC_CHECK(!b.packed || (b.cu_seqlens.defined() && b.cu_seqlens.dim() == 1),
           "bert: a packed batch needs cu_seqlens [S_total + 1]");
  const std::vector<int64_t> ids = b.input_ids.to_vector_i64(), seg = b.segment_ids.to_vector_i64(),
                             pos = b.position_ids.to_vector_i64();
  for (size_t i = 0; i < ids.size(); ++i) {
    FC_CHECK(ids[i] >= 0 && ids[i] < c.vocab_size, "bert: input id ", ids[i], " outside [0, ", c.vocab_size, ")");
    FC_CHECK(seg[i] >= 0 && seg[i] < c.type_vocab_size, "bert: segment id ", seg[i], " outside [0, ",
             c.type_vocab_size, ")");
    FC_CHECK(pos[i] >= 0 && pos[i] < c.max_positions, "bert: position id ", pos[i], " outside [0, ",
             c.max_positions, ")");
  }
}

BertEmbeddings::BertEmbeddings(nn::Scope scope, const BertModelConfig& c)
    : Module(scope),
      ln_(child_scope("layer_norm"), c.hidden, c.ln_eps),
      dropout_(child_scope("dropout"), c.dropout) {
  Generator& g = *scope.init_rng;
  word_ = add_parameter("word_embeddings", {c.vocab_size, c.hidden}, true,
                        trunc_normal({c.vocab_size, c.hidden}, g, c.init_std));
  position_ = add_parameter("position_embeddings", {c.max_positions, c.hidden}, true,
                            trunc_normal({c.max_positions, c.hidden}, g, c.init_std));
  segment_ = add_parameter("token_type_embeddings", {c.type_vocab_size, c.hidden}, true,
                           trunc_normal({c.type_vocab_size, c.hidden}, g, c.init_std));
  register_child(ln_);
  register_child(dropout_);
}

Variable BertEmbeddings::forward(const Tensor& input_ids, const Tensor& segment_ids,
                                 const Tensor& position_ids) const {
  const Device d = word_.device();
  Variable x = add(embedding(word_, input_ids.to(d)), embedding(position_, position_ids.to(d)));
  x = add(x, embedding(segment_, segment_ids.to(d)));
  return dropout_.forward(ln_.forward(x));
}

BertForPreTraining::BertForPreTraining(nn::Scope scope, const BertModelConfig& c)
    : Module(scope),
      c_(c),
      device_(scope.params->device()),
      embeddings_(child_scope("embeddings"), c),
      transform_(child_scope("mlm/transform"), c.hidden, c.hidden, bert_linear(ops::Activation::gelu)),
      transform_ln_(child_scope("mlm/layer_norm"), c.hidden, c.ln_eps),
      pooler_(child_scope("pooler"), c.hidden, c.hidden, bert_linear()),
      nsp_(child_scope("nsp"), c.hidden, 2, bert_linear()) {
  FC_CHECK(c.hidden > 0 && c.num_heads > 0 && c.hidden % c.num_heads == 0, "bert: hidden ", c.hidden,
           " must be a positive multiple of num_heads ", c.num_heads);
  FC_CHECK(c.num_layers > 0 && c.ffn > 0 && c.vocab_size > 0 && c.max_positions > 0 && c.type_vocab_size > 0,
           "bert: layers, ffn, vocab, positions and segment types must be positive");
  register_child(embeddings_);
  nn::EncoderLayerOptions lo;
  lo.d_model = c.hidden;
  lo.num_heads = c.num_heads;
  lo.d_ff = c.ffn;
  lo.dropout = c.dropout;
  lo.ln_eps = c.ln_eps;
  lo.init = nn::Init::bert;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    layers_.push_back(std::make_unique<nn::TransformerEncoderLayer>(child_scope("encoder/layer_" + std::to_string(l)), lo));
    register_child(*layers_.back());
  }
  register_child(transform_);
  register_child(transform_ln_);
  decoder_bias_ = add_parameter("mlm/output_bias", {c.vocab_size}, false);
  register_child(pooler_);
  register_child(nsp_);
}

Variable BertForPreTraining::encode(const BertBatch& batch) const {
  const int64_t b = batch.input_ids.size(0), l = batch.input_ids.size(1);
  Variable x = embeddings_.forward(batch.input_ids, batch.segment_ids, batch.position_ids);
  if (batch.packed) {
    // One [1, B·L] stream; attention stays inside each cu_seqlens segment.
    const Tensor cu = batch.cu_seqlens.to(DType::i32).to(device_);
    x = reshape(x, {1, b * l, c_.hidden});
    for (const auto& layer : layers_) x = layer->forward(x, {}, cu);
    return reshape(x, {b, l, c_.hidden});
  }
  // Padding mask bias [B,1,1,L] = 1e9·(mask − 1) (omitted when every token is real).
  const std::vector<int64_t> m = batch.input_mask.to_vector_i64();
  Variable bias;
  if (std::any_of(m.begin(), m.end(), [](int64_t v) { return v == 0; })) {
    std::vector<float> mb(m.size());
    for (size_t i = 0; i < m.size(); ++i) mb[i] = m[i] != 0 ? 0.f : -1e9f;
    bias = Variable(Tensor::from_vector(mb, {b, 1, 1, l}, DType::f32, device_));
  }
  for (const auto& layer : layers_) x = layer->forward(x, bias);
  return x;
}

BertOutputs BertForPreTraining::forward(const BertBatch& batch, bool count_correct) const {
  check_batch(batch, c_);
  const int64_t b = batch.input_ids.size(0), l = batch.input_ids.size(1), p = batch.masked_lm_positions.size(1);
  BertOutputs out;
  out.sequence = encode(batch);
  // The heads read rows of the flat [B·L, hidden] encoder output (fp32: the gather's backward
  // scatters into an fp32 buffer).
  const Variable flat = reshape(cast(out.sequence, DType::f32), {b * l, c_.hidden});

  // Masked LM on the real masked positions only (MLPerf: ≤ 76 per row, weight 1).
  const std::vector<int32_t> pos = host_i32(batch.masked_lm_positions), ids = host_i32(batch.masked_lm_ids);
  const std::vector<float> w = batch.masked_lm_weights.to_vector();
  std::vector<int32_t> rows, labels;
  for (int64_t r = 0; r < b; ++r)
    for (int64_t j = 0; j < p; ++j) {
      const size_t k = static_cast<size_t>(r * p + j);
      if (w[k] <= 0.f) continue;
      FC_CHECK(pos[k] >= 0 && pos[k] < l, "bert: masked_lm_positions[", r, ", ", j, "] = ", pos[k], " outside [0, ",
               l, ")");
      FC_CHECK(ids[k] >= 0 && ids[k] < c_.vocab_size, "bert: masked_lm_ids[", r, ", ", j, "] = ", ids[k],
               " outside the vocabulary");
      rows.push_back(static_cast<int32_t>(r * l + pos[k]));
      labels.push_back(ids[k]);
    }
  FC_CHECK(!rows.empty(), "bert: the batch has no real masked positions (all masked_lm_weights are 0)");
  out.mlm_count = static_cast<int64_t>(rows.size());
  out.mlm_labels = i32_tensor(labels, Device::cpu());
  Variable h = transform_ln_.forward(transform_.forward(embedding(flat, i32_tensor(rows, device_))));
  out.mlm_logits = add(matmul(h, embeddings_.word_embeddings(), false, true), decoder_bias_);
  CrossEntropyOptions ce;
  ce.labels = out.mlm_labels.to(device_);
  ce.denominator = static_cast<double>(out.mlm_count);
  out.mlm_loss = softmax_cross_entropy(out.mlm_logits, ce);

  // Next-sentence prediction from each sequence's [CLS].
  const std::vector<int32_t> cls = host_i32(batch.nsp_positions);
  for (int32_t i : cls)
    FC_CHECK(i >= 0 && i < b * l, "bert: nsp_position ", i, " outside the B·L = ", b * l, " token stream");
  out.nsp_labels = batch.nsp_labels.to(Device::cpu()).to(DType::i32);
  const Variable pooled = tanh_via_sigmoid(pooler_.forward(embedding(flat, i32_tensor(cls, device_))));
  out.nsp_logits = nsp_.forward(pooled);
  CrossEntropyOptions nce;
  nce.labels = out.nsp_labels.to(device_);
  nce.denominator = static_cast<double>(cls.size());
  out.nsp_loss = softmax_cross_entropy(out.nsp_logits, nce);
  out.loss = add(out.mlm_loss, out.nsp_loss);
  if (count_correct) {
    out.mlm_correct = count_argmax_hits(out.mlm_logits, out.mlm_labels);
    out.nsp_correct = count_argmax_hits(out.nsp_logits, out.nsp_labels);
  }
  return out;
}

// Matmul FLOPs (2 per multiply-add) of one forward:
//   per token and layer: Q,K,V,O projections 4·2d² + FFN 2·2·d·ff + attention scores and
//   weighted sum 2·2·attn_len·d (attn_len = Σ_seq len² / tokens: the mean attended length);
//   per MLM row: transform 2d² + decoder 2dV;  per sequence: pooler 2d² + classifier 2·2d.
// Pointwise ops, LayerNorm, softmax and embeddings are not counted (< 1% for BERT-Large).
// A training step costs 3× the forward (the backward computes two GEMMs per forward GEMM).
double BertForPreTraining::forward_flops(double tokens, double attn_len, double predictions, double sequences) const {
  const double d = static_cast<double>(c_.hidden), ff = static_cast<double>(c_.ffn),
               v = static_cast<double>(c_.vocab_size);
  const double per_token_layer = 8 * d * d + 4 * d * ff + 4 * attn_len * d;
  return tokens * per_token_layer * static_cast<double>(c_.num_layers) + predictions * (2 * d * d + 2 * d * v) +
         sequences * (2 * d * d + 4 * d);
}

}  // namespace foldcore::bert
