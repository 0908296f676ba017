#include "profiler.h"

namespace lattice {

const char* op_name(Op op) {
  switch (op) {
    case Op::kEmbedding:
      return "embedding";
    case Op::kLayerNorm:
      return "layernorm";
    case Op::kMatmulForward:
      return "linear forward";
    case Op::kMatmulBackward:
      return "linear backward";
    case Op::kAttentionForward:
      return "attention forward";
    case Op::kAttentionBackward:
      return "attention backward";
    case Op::kGelu:
      return "gelu";
    case Op::kResidualDropout:
      return "residual + dropout";
    case Op::kLmHeadForward:
      return "lm head forward";
    case Op::kLmHeadBackward:
      return "lm head backward";
    case Op::kCrossEntropy:
      return "softmax cross-entropy";
    case Op::kOptimizer:
      return "adamw";
    case Op::kGradNorm:
      return "grad norm + clip";
    case Op::kTensorParallelComm:
      return "tensor-parallel comm";
    case Op::kData:
      return "data";
    case Op::kCount:
      break;
  }
  return "?";
}

double Profiler::total_seconds() const {
  double total = 0;
  for (double s : seconds_) total += s;
  return total;
}

}  // namespace lattice
