// Fused softmax + cross-entropy and the vocabulary-parallel passes of kernels.h, one block
// per row. Row sums accumulate in double (as on the CPU: a float sum over ~50k terms loses
// ~1e-5). dlogits may alias logits: every element is read before the first write.
#include <cmath>

#include "common.cuh"
#include "cross_entropy_kernels.cuh"

namespace lattice::kernels::cuda {

void softmax_cross_entropy(Context& ctx, float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int N, int V, float grad_scale) {
  softmax_cross_entropy_kernel<<<N, kThreads, 0, stream_of(ctx)>>>(losses, dlogits, logits, targets,
                                                                   V, grad_scale);
  check_launch(ctx, "softmax_cross_entropy");
}

void cross_entropy_shard_max(Context& ctx, float* row_max, const float* logits, int N, int V) {
  shard_max_kernel<<<N, kThreads, 0, stream_of(ctx)>>>(row_max, logits, V);
  check_launch(ctx, "cross_entropy_shard_max");
}

void cross_entropy_shard_sums(Context& ctx, double* sum_exp, float* target_logit,
                              const float* logits, const float* row_max, const int32_t* targets,
                              int vocab_begin, int N, int V) {
  shard_sums_kernel<<<N, kThreads, 0, stream_of(ctx)>>>(sum_exp, target_logit, logits, row_max,
                                                        targets, vocab_begin, V);
  check_launch(ctx, "cross_entropy_shard_sums");
}

void cross_entropy_shard_finish(Context& ctx, float* losses, float* dlogits, const float* logits,
                                const float* row_max, const double* sum_exp,
                                const float* target_logit, const int32_t* targets, int vocab_begin,
                                int N, int V, float grad_scale) {
  shard_finish_kernel<<<N, kThreads, 0, stream_of(ctx)>>>(
      losses, dlogits, logits, row_max, sum_exp, target_logit, targets, vocab_begin, V, grad_scale);
  check_launch(ctx, "cross_entropy_shard_finish");
}

}  // namespace lattice::kernels::cuda
