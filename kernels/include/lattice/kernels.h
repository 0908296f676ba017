// The one list of compute operations. Every backend implements this list with these
// signatures (CPU: kernels/cpu/, OpenBLAS + OpenMP; CUDA: kernels/cuda/, issue 10).
// Names used in shape comments: B batch, T sequence, C channels, NH heads, HS = C / NH,
// N = B*T rows, V vocabulary (padded), F feed-forward width, OC output channels.
//
// Gradient convention: parameter gradients are ACCUMULATED (+=) so that micro-batches add
// up; activation gradients are WRITTEN (=) unless the comment says "+=" (layernorm writes
// into the residual stream's gradient, which it adds to). All ops are deterministic for a
// fixed thread count. Templates are instantiated for float (training) and double
// (gradient checks against finite differences); S is the scalar type.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattice::kernels {

// Threads used by OpenMP loops and by BLAS. Defaults to the machine's cores.
void set_num_threads(int threads);
int num_threads();
// The BLAS library's own description of the kernel it runs ("SkylakeX", "Haswell", ...).
const char* blas_core_name();
// Settings the runtimes read once, before main runs, so that only re-executing the program
// applies them (kernels/cpu/README.md): unless the user set them,
// - Note [OpenMP waiting]: with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, GOMP_SPINCOUNT
//   = kOpenMpSpinCount (an idle thread spins that many PAUSE instructions, a few to some tens of
//   microseconds, then sleeps);
// - Note [glibc's thread cache]: kGlibcTunables added to GLIBC_TUNABLES unless it names
//   glibc.malloc.tcache_count already.
// then re-executes this program (/proc/self/exe with `argv`; same process id and arguments).
// Call first thing in main; returns only when nothing was to be done or the exec failed.
inline constexpr const char* kOpenMpSpinCount = "1000";
inline constexpr const char* kGlibcTunables = "glibc.malloc.tcache_count=0";
void apply_process_settings(char** argv);

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null.
template <typename S>
void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C, int OC);
// out (N, OC) += bias (OC) on every row (row-parallel layers add it after the reduction).
template <typename S>
void add_bias(S* out, const S* bias, int N, int OC);
// dinp (N, C) = dout (N, OC) @ weight (OC, C)      (skipped when dinp is null)
// dweight (OC, C) += dout^T @ inp;  dbias (OC) += column sums of dout (each skipped when null)
template <typename S>
void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                     int N, int C, int OC);

// out (B, T, C) = wte[tokens[b, t]] + wpe[p];  tokens (B, T) index rows of wte (V, C).
// Vocabulary-parallel: wte holds rows [vocab_begin, vocab_end) only; other tokens give zero
// rows (summed over tensor-parallel ranks afterwards). wpe may be null (added later).
// p = positions[b, t] (B, T), each token's position in its own packed document (Note [packed
// sequences], docs/models.md), or t when positions is null.
template <typename S>
void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                       int C, int vocab_begin = 0, int vocab_end = 1 << 30,
                       const int32_t* positions = nullptr);
// out (B, T, C) += wpe[t]
template <typename S>
void position_embedding_forward(S* out, const S* wpe, int B, int T, int C);
// dwte (V, C) += scatter of dout by token (rows [vocab_begin, vocab_end) as above);
// dwpe (T, C) += dout scattered by position (positions[b, t], or t when null), in token order.
// Either may be null.
template <typename S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T, int C,
                        int vocab_begin = 0, int vocab_end = 1 << 30,
                        const int32_t* positions = nullptr);

// out (N, C) = (inp - mean) * rstd * weight + bias, per row; mean, rstd (N) are saved.
inline constexpr double kLayerNormEps = 1e-5;
template <typename S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                       int N, int C);
// The residual add fused into the next LayerNorm (one pass per row):
// residual_out (N, C) = residual (N, C) + x (N, C), then out (N, C), mean, rstd (N) =
// layernorm_forward of residual_out, bit for bit. residual_out may alias residual; x and out
// alias nothing.
template <typename S>
void residual_layernorm_forward(S* residual_out, S* out, S* mean, S* rstd, const S* residual,
                                const S* x, const S* weight, const S* bias, int N, int C);
// dinp (N, C) += ..., dweight (C) += ..., dbias (C) += ...
template <typename S>
void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                        const S* mean, const S* rstd, int N, int C);

// RMSNorm (Llama; Hugging Face's LlamaRMSNorm): out (N, C) = inp * rstd * weight (C), per row,
// rstd (N) = 1 / sqrt(mean(inp^2) + eps) saved; the mean of squares accumulated in double.
template <typename S>
void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* weight, int N, int C, float eps);
// The residual add fused into the next RMSNorm, as residual_layernorm_forward: residual_out
// (N, C) = residual + x, then out, rstd = rmsnorm_forward of residual_out, bit for bit.
// residual_out may alias residual; x and out alias nothing.
template <typename S>
void residual_rmsnorm_forward(S* residual_out, S* out, S* rstd, const S* residual, const S* x,
                              const S* weight, int N, int C, float eps);
// dinp (N, C) += ..., dweight (C) += ... given dout (N, C), the forward's inp and rstd.
template <typename S>
void rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,
                      const S* rstd, int N, int C);

// Rotary position embedding (RoPE, Hugging Face's rotate_half form) in place on the query and
// key heads of qkv (N, (NH + 2 KV) * HS) in the grouped layout of attention_forward; values are
// untouched. Row n is at position positions[n], or n % T when positions is null: for training
// positions (B, T) are the packed documents' positions (Note [packed sequences]), for
// inference one position per decoded row. For each
// rotated head x and i < R/2 (R = rotary_dim, even, <= HS; dims [R, HS) pass through):
//   x[i]       = x[i] cos[p, i] - x[i + R/2] sin[p, i]
//   x[i + R/2] = x[i + R/2] cos[p, i] + x[i] sin[p, i]
// cos, sin (positions, R/2): rope_tables' angles p * theta^(-2i/R).
template <typename S>
void rope_forward(S* qkv, const S* cos, const S* sin, const int32_t* positions, int N, int T,
                  int NH, int KV, int HS, int rotary_dim);
// dqkv (N, (NH + 2 KV) * HS) in place: the gradient through the rotation (its transpose) for
// the query and key heads; the value heads' gradients are left as they are.
template <typename S>
void rope_backward(S* dqkv, const S* cos, const S* sin, const int32_t* positions, int N, int T,
                   int NH, int KV, int HS, int rotary_dim);
// The tables (P, R/2) of rope_forward for positions [0, P), as Hugging Face computes them:
// inv_freq[i] = 1 / theta^(2i/R) and the angle p * inv_freq[i] in float (the rounding every
// released Llama was trained with), then cos and sin of that angle in double. llama3_factor > 0:
// Llama 3.1's frequency scaling first (transformers' rope_type "llama3", Megatron's
// --use-rope-scaling: low_freq_factor 1, high_freq_factor 4, 8192 original positions) with that
// factor: inverse frequencies whose wavelength 2 pi / f exceeds 8192 are divided by the factor,
// those below 8192 / 4 kept, those between interpolated; in float, as transformers computes it.
void rope_tables(double* cos, double* sin, int P, int rotary_dim, double theta,
                 double llama3_factor = 0);

// SwiGLU (Llama's gated MLP): inp (N, 2F) holds per row the gate [0, F) then the up projection
// [F, 2F) (Megatron's linear_fc1 output); out (N, F) = silu(gate) * up, silu(g) = g sigmoid(g).
template <typename S>
void swiglu_forward(S* out, const S* inp, int N, int F);
// dinp (N, 2F) = the gradient of gate and up given dout (N, F); dinp may not alias inp.
template <typename S>
void swiglu_backward(S* dinp, const S* inp, const S* dout, int N, int F);

// GELU, tanh approximation (GPT-2, Megatron's default bias-gelu). out (n) may alias inp.
template <typename S>
void gelu_forward(S* out, const S* inp, size_t n);
// dinp (n) = dout * gelu'(inp); dinp may alias dout.
template <typename S>
void gelu_backward(S* dinp, const S* inp, const S* dout, size_t n);

// Dropout masks are not stored: element i of a tensor is kept when a counter-based hash of
// (key, i) falls below 1 - p, so forward, backward and recomputation regenerate the same
// mask on any thread count. Kept elements are scaled by 1 / (1 - p). p == 0 is identity.
// index_offset: the tensor's first element in the whole (unsplit) tensor, so that a rank
// holding a sequence slice draws the same mask as one process holding all of it.
// out (n) = residual (n) + dropout(x (n)); out may alias residual or x; residual may be null.
template <typename S>
void residual_dropout_forward(S* out, const S* residual, const S* x, size_t n, float p,
                              uint64_t key, size_t index_offset = 0);
// dx (n) = dropout mask applied to dout (n); dx may alias dout.
template <typename S>
void dropout_backward(S* dx, const S* dout, size_t n, float p, uint64_t key,
                      size_t index_offset = 0);

// Causal self-attention over qkv (B, T, (NH + 2 KV) HS) in Megatron's grouped layout: key/value
// head (query group) g owns columns [g*(Q+2)*HS, (g+1)*(Q+2)*HS), Q = NH / KV, holding its Q
// query heads, then its key, then its value; query head h = g*Q + j reads group g's key and
// value (never copied per query head). KV = NH (kv_heads 0) is the per-head layout [q|k|v] of
// GPT-2, Q = 1. C = NH * HS. out (B, T, C), query head h at columns h*HS.
// lse (B, NH, T) keeps each query row's log-sum-exp of its scores q k^T / sqrt(HS) over the keys
// it sees (natural log, as CUDA's): all the backward needs to recompute the probabilities, so
// nothing of size T x T outlives a call (flash style; Note [attention keeps log-sum-exps]).
// workspace: attention_workspace_elems(T, HS) elements per thread (num_threads() of them): on
// the CPU three blocks of kAttentionRowBlock rows of about T (the block's probabilities, their
// dropped-out copy and the backward's score gradients) and the key and value head transposed,
// about 3 min(T, kAttentionRowBlock) T + 2 HS T (kernels/cpu/attention_workspace.h).
// Tensor-parallel ranks hold heads [head_offset, head_offset + NH) of total_heads (0: NH);
// the dropout mask of probability (b, h, i, j) is keyed by its index among all heads.
// positions (B, T), when non-null, packs several documents into one sequence: query i sees only
// keys [i - positions[b, i], i] (its own document; Note [packed sequences], docs/models.md), the
// rest of the row's probabilities zero. Null: plain causal, keys [0, i].
inline constexpr int kAttentionRowBlock = 64;
size_t attention_workspace_elems(int T, int HS);
template <typename S>
void attention_forward(S* out, S* lse, const S* qkv, int B, int T, int C, int NH, float dropout_p,
                       uint64_t dropout_key, S* workspace, int head_offset = 0, int total_heads = 0,
                       int kv_heads = 0, const int32_t* positions = nullptr);
// dqkv (B, T, (NH + 2 KV) HS) = gradient of the attention inputs given dout (B, T, C); a key or
// value head's gradient sums its group's query heads. lse, dropout and positions as the
// forward's (the backward recomputes the probabilities from them).
template <typename S>
void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* lse, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, S* workspace,
                        int head_offset = 0, int total_heads = 0, int kv_heads = 0,
                        const int32_t* positions = nullptr);

// Incremental decoding (inference): M query rows, row m belonging to cache slot slots[m] at
// position positions[m]. qkv (M, (NH + 2 KV) HS) in the grouped layout above (kv_heads 0: KV =
// NH). Each row's key and value are first stored in k_cache, v_cache (slots, KV, max_T, HS) at
// (slot, key/value head, position);
// then out (M, NH*HS) = softmax(q k^T / sqrt(HS)) v over positions [0, positions[m]] of the
// row's slot (rows of one call may read each other's keys: a whole prompt at once).
// workspace: max_T elements per thread (num_threads() of them). No dropout.
template <typename S>
void attention_kv_forward(S* out, S* k_cache, S* v_cache, const S* qkv, const int32_t* slots,
                          const int32_t* positions, int M, int NH, int HS, int max_T, S* workspace,
                          int kv_heads = 0);

// One block of blockwise attention (flash style: no probabilities kept), the compute of ring
// attention for context parallelism (engine/src/parallel/ring_attention.h, Note [ring attention]).
// Queries: rows [q_begin, q_end) of each sequence of qkv (B, Tq, (NH + 2 KV) HS), the grouped
// layout above. Keys and values: rows [k_begin, k_end) of kv (B, Tk, 2 KV HS), key/value head g's
// key at columns 2 g HS and its value after it (the grouped layout without query heads). Query
// row i (global position q_pos[i]) sees key row j when k_pos[j] <= q_pos[i] and, with doc
// non-null, k_pos[j] >= q_pos[i] - doc[b, i] (its own packed document; Note [packed sequences]).
// k_pos must not decrease over [k_begin, k_end) (the ring's chunks ascend, the tower's keys are
// 0 .. T - 1): the CPU kernel finds each row's keys by binary search.
struct AttentionBlock {
  int B = 0, NH = 0, KV = 0, HS = 0;
  int Tq = 0, q_begin = 0, q_end = 0;  // rows of qkv, out and lse per sequence; the rows taken
  int Tk = 0, k_begin = 0, k_end = 0;  // rows of kv per sequence; the rows taken
  const int32_t* q_pos = nullptr;      // (Tq) global positions of qkv's rows
  const int32_t* k_pos = nullptr;      // (Tk) global positions of kv's rows, ascending
  const int32_t* doc = nullptr;        // (B, Tq) position in the packed document, or null
};
// Workspace of both directions, per thread (num_threads() of them): kAttentionRowBlock query rows
// at a time, about 2 min(Tq, kAttentionRowBlock) Tk + min(Tq, kAttentionRowBlock) (HS + 1), and on
// the CPU a head's keys and values packed three times, about 3 Tk HS
// (kernels/cpu/attention_workspace.h).
size_t attention_block_workspace_elems(int Tq, int Tk, int HS);
// out (B, Tq, NH HS) and lse (B, NH, Tq) hold, for each query row, the attention output and the
// log-sum-exp of the scores over the keys merged so far (out 0 and lse -inf: none); the block's
// keys are merged into them (rows outside [q_begin, q_end) untouched).
template <typename S>
void attention_block_forward(S* out, S* lse, const S* qkv, const S* kv, const AttentionBlock& block,
                             S* workspace);
// The block's part of the gradient given dout (B, Tq, NH HS), the final lse and delta (B, NH, Tq)
// = rowsum(dout * out) of the final out: ADDED to the query columns of dqkv (B, Tq, (NH + 2 KV)
// HS) (its key and value columns untouched) and to dkv (B, Tk, 2 KV HS).
template <typename S>
void attention_block_backward(S* dqkv, S* dkv, const S* dout, const S* delta, const S* lse,
                              const S* qkv, const S* kv, const AttentionBlock& block, S* workspace);
// The ring's data movement around those blocks (attention_ring.cpp; kernels::cuda has the same
// ops on device memory). kv (rows, 2 KV HS) = the key and value columns of qkv (rows, (NH + 2 KV)
// HS) in the grouped layout (group g: Q = NH / KV query heads, then its key, then its value).
template <typename S>
void attention_kv_pack(S* kv, const S* qkv, size_t rows, int NH, int KV, int HS);
// The key and value columns of qkv = kv; qkv's query columns untouched.
template <typename S>
void attention_kv_unpack(S* qkv, const S* kv, size_t rows, int NH, int KV, int HS);
// delta (B, NH, T) = per row and head, the dot of dout and out (B, T, NH HS) over HS, summed in
// order (the softmax backward's rowsum over every key of the ring).
template <typename S>
void attention_row_dot(S* delta, const S* dout, const S* out, int B, int T, int NH, int HS);
// x (n) = value.
template <typename S>
void fill(S* x, size_t n, S value);
// acc (n) += x (n).
template <typename S>
void accumulate(S* acc, const S* x, size_t n);

// ---- vision encoder (cpu/vision.cpp; engine/src/model/vision_encoder.cpp) ----
// A ViT's patch embedding is a Conv2d with stride = kernel = P, i.e. im2col (a permutation, the
// patches do not overlap) and a GEMM with the weight (OC, Cin P P) in PyTorch's (OC, Cin, P, P)
// order. cols (B, (H / P) (W / P), Cin P P): row (b, py (W / P) + px), column (c P + ky) P + kx
// = img (B, Cin, H, W)[b, c, py P + ky, px P + kx]. H and W are multiples of P.
template <typename S>
void patchify_forward(S* cols, const S* img, int B, int Cin, int H, int W, int P);
// dimg (B, Cin, H, W) = the inverse permutation of dcols; written (every pixel is in one patch).
template <typename S>
void patchify_backward(S* dimg, const S* dcols, int B, int Cin, int H, int W, int P);

// The vision tower's activations beside gelu_forward's tanh form: CLIP's quick_gelu
// x sigmoid(1.702 x) (OpenAI CLIP, HF "quick_gelu") and the exact GELU x Phi(x) = 0.5 x (1 +
// erf(x / sqrt 2)) (torch.nn.GELU(), LLaVA-1.5's projector).
enum class Activation { kQuickGelu, kGeluErf };
// out (n) = act(inp (n)); may alias.
template <typename S>
void activation_forward(S* out, const S* inp, size_t n, Activation act);
// dinp (n) = dout * act'(inp); dinp may alias dout, not inp.
template <typename S>
void activation_backward(S* dinp, const S* inp, const S* dout, size_t n, Activation act);

// The target of a row that carries no loss and no gradient (Megatron's loss_mask 0, PyTorch's
// ignore_index): every cross-entropy below writes loss 0 and a zero dlogits row for it.
constexpr int32_t kIgnoreIndex = -1;

// Fused softmax + cross-entropy over logits (N, V): losses (N) = -log softmax(row)[target].
// When dlogits is non-null it receives (softmax - onehot(target)) * grad_scale and may alias
// logits (the logits are then consumed). Targets lie in [0, V) or are negative (kIgnoreIndex:
// loss 0, dlogits row 0).
template <typename S>
void softmax_cross_entropy(S* losses, S* dlogits, const S* logits, const int32_t* targets, int N,
                           int V, float grad_scale);

// Vocabulary-parallel cross-entropy (Megatron's VocabParallelCrossEntropy): this rank holds
// logits (N, V) of vocabulary [vocab_begin, vocab_begin + V); the full rows are never
// gathered. Between the passes the caller reduces over the tensor-parallel ranks:
// 1) row_max (N) = max of each row               -> all-reduce max
// 2) sum_exp (N) = sum of exp(x - row_max); target_logit (N) = the target's logit when this
//    rank holds it, else 0                         -> all-reduce sum of both
// 3) losses (N) = log(sum_exp) - (target_logit - row_max); dlogits (optional, may alias
//    logits) = (softmax - onehot) * grad_scale over this rank's columns.
// A negative target (kIgnoreIndex) gives target_logit 0, loss 0 and a zero dlogits row.
template <typename S>
void cross_entropy_shard_max(S* row_max, const S* logits, int N, int V);
template <typename S>
void cross_entropy_shard_sums(double* sum_exp, S* target_logit, const S* logits, const S* row_max,
                              const int32_t* targets, int vocab_begin, int N, int V);
template <typename S>
void cross_entropy_shard_finish(S* losses, S* dlogits, const S* logits, const S* row_max,
                                const double* sum_exp, const S* target_logit,
                                const int32_t* targets, int vocab_begin, int N, int V,
                                float grad_scale);

// AdamW (decoupled weight decay, Megatron / apex FusedAdam): step counts from 1.
// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr (m^ / (sqrt(v^) + eps) + wd p).
struct AdamWParams {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  int step = 1;
};
template <typename S>
void adamw_update(S* param, const S* grad, S* m, S* v, size_t n, const AdamWParams& p);
// One tensor of a multi-tensor AdamW step.
template <typename S>
struct AdamWTensor {
  S* param = nullptr;
  const S* grad = nullptr;
  S* m = nullptr;
  S* v = nullptr;
  size_t n = 0;
  bool decay = true;  // false: no weight decay (biases and norms, as Megatron)
};
// adamw_update on each of `count` tensors, weight decay off where decay is false, with each grad
// multiplied by grad_scale first (gradient clipping folded in; the grads are not written): the
// same result, element for element, as scale(grad, n, grad_scale) and then adamw_update, tensor
// by tensor, in one parallel pass over all of them (one OpenMP region, not two per tensor).
template <typename S>
void adamw_update(const AdamWTensor<S>* tensors, int count, const AdamWParams& p, S grad_scale);

// sum of x^2 accumulated in double, in a fixed order that depends on neither the thread count
// nor the instruction set (blocks of 8192 elements, 16 lanes each; the blocks summed in order).
template <typename S>
double sum_squares(const S* x, size_t n);
// The sum of x^2 over `count` tensors (arrays of pointers and sizes) in one parallel pass: the
// tensors' sum_squares added in order, exactly.
template <typename S>
double sum_squares(const S* const* tensors, const size_t* sizes, int count);
// x (n) *= s
template <typename S>
void scale(S* x, size_t n, S s);

// ---- Mixture of experts (docs/models.md#mixture-of-experts): the routing ops, plain host code
// compiled once (kernels/cpu/moe.cpp; small next to the experts' GEMMs). N tokens, E experts, k
// routes per token; the "permuted" rows are the kept routes, expert-major and in token order
// within an expert, so each expert's rows are one contiguous block for its GEMMs.
// probs (N, E) = softmax(logits (N, E)) in double; route (N, k) = the experts of the k largest
// logits in descending order (ties: the lower expert); weight (N, k) = their probabilities
// renormalised to sum 1 (Mixtral's rule; equal to Megatron's softmax over the top-k logits).
template <typename S>
void moe_route(S* probs, int32_t* route, S* weight, const S* logits, int N, int E, int k);
// The dispatch plan. tokens_per_expert (E) = routes to each expert before dropping; capacity > 0
// keeps, per expert, its `capacity` routes of largest weight (Megatron's "probs" drop policy;
// ties: the lower token) and drops the rest; counts (E) = the kept routes per expert;
// route_slot (N, k) = each kept route's permuted row, -1 where dropped; slot_row (N k) = the
// token of each permuted row (the first sum(counts) are used).
template <typename S>
void moe_dispatch_plan(int32_t* tokens_per_expert, int32_t* counts, int32_t* route_slot,
                       int32_t* slot_row, const int32_t* route, const S* weight, int N, int E,
                       int k, int capacity);
// out (rows, C): row s = inp (N, C)'s row slot_row[s].
template <typename S>
void moe_gather_rows(S* out, const S* inp, const int32_t* slot_row, int rows, int C);
// dinp (N, C) += for each kept route (n, j) the row route_slot[n, j] of d_rows.
template <typename S>
void moe_scatter_add_rows(S* dinp, const S* d_rows, const int32_t* route_slot, int N, int C, int k);
// out (N, C) = sum over token n's kept routes j of weight[n, j] expert_out[route_slot[n, j]]
// (zero for a token whose routes were all dropped).
template <typename S>
void moe_combine(S* out, const S* expert_out, const S* weight, const int32_t* route_slot, int N,
                 int C, int k);
// Its backward given dout (N, C): d_expert_out's row route_slot[n, j] = weight[n, j] dout[n];
// dweight (N, k) = dout[n] . expert_out[route_slot[n, j]], 0 where dropped. Both written.
template <typename S>
void moe_combine_backward(S* d_expert_out, S* dweight, const S* dout, const S* expert_out,
                          const S* weight, const int32_t* route_slot, int N, int C, int k);
// Megatron's switch_load_balancing_loss_func at one micro-batch: *loss = coeff E / (k N^2)
// sum_e tokens_per_expert[e] sum_n probs[n, e] (= coeff E sum_e f_e P_e, f_e the share of the
// N k routes to e, P_e the mean probability of e).
template <typename S>
void moe_aux_loss(S* loss, const S* probs, const int32_t* tokens_per_expert, int N, int E, int k,
                  double coeff);
// dlogits (N, E) = the gradient of the logits given dweight (N, k) (through the renormalised
// top-k softmax) plus aux_scale x the gradient of moe_aux_loss(coeff 1) (the counts held
// constant, as Megatron's); written.
template <typename S>
void moe_route_backward(S* dlogits, const S* dweight, const S* probs, const int32_t* route,
                        const S* weight, const int32_t* tokens_per_expert, int N, int E, int k,
                        double aux_scale);

}  // namespace lattice::kernels
