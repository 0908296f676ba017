// Linear layers on cuBLASLt: fp32, bf16 or fp16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F,
// so no TF32), bias and GELU fused as epilogues. Row-major tensors are read as their column-major
// transposes: out^T (OC, N) = weight (OC, C) . inp^T (C, N). The bias gradient is our own
// deterministic column-sum kernel rather than cuBLASLt's BGRADB epilogue, which does not
// accept every type combination used here. Where cuBLASLt has no kernel for a fused
// epilogue (type, shape), the plain GEMM and our bias / GELU kernels do the same work.
// Non-goal: a plan cache (the heuristic query costs a few microseconds per call; profile
// before adding one).
#include "common.cuh"

namespace lattice::kernels::cuda {
namespace {

// Stage 1 of dbias (OC) += sum over rows of dout (N, OC) (reduce.cuh's column sums): rows
// [blockIdx.y * rows_per_block, +rows_per_block) of 32 columns, 8 row lanes, into partial
// (gridDim.y x OC), or straight into dbias when partial is null. Deterministic.
template <typename T>
__global__ void bias_grad_kernel(float* partial, float* dbias, const T* dout, int N, int OC,
                                 int rows_per_block) {
  __shared__ float lanes[8][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  const int row0 = blockIdx.y * rows_per_block, row1 = min(N, row0 + rows_per_block);
  float sum = 0.0f;
  if (col < OC)
    for (int row = row0 + threadIdx.y; row < row1; row += 8)
      sum += to_float(dout[static_cast<size_t>(row) * OC + col]);
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float total = 0.0f;
    for (int i = 0; i < 8; i++) total += lanes[i][threadIdx.x];
    if (partial)
      partial[static_cast<size_t>(blockIdx.y) * OC + col] = total;
    else
      dbias[col] += total;
  }
}

// out (N, OC) += bias (OC)
template <typename T>
__global__ void add_bias_kernel(T* out, const T* bias, size_t total, int OC) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(to_float(out[i]) + to_float(bias[i % OC]));
}

template <typename T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, fp16>)
    return CUDA_R_16F;
  else if constexpr (std::is_same_v<T, bf16>)
    return CUDA_R_16BF;
  else
    return CUDA_R_32F;
}

// One cuBLASLt call in column-major terms: D (m, n) = alpha op(A) op(B) + beta D, A and B of
// type AB, D of type D_T; epilogue with bias (m) and aux (m, n, ld m) as cuBLASLt defines.
struct LtCall {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const void* A = nullptr;
  int lda = 0;
  const void* B = nullptr;
  int ldb = 0;
  void* D = nullptr;
  int ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  float beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
  void* aux = nullptr;
};

// Issues the call; returns its status. Errors are recorded in ctx unless `quiet` (a caller
// that has a fallback for an unsupported epilogue).
cublasStatus_t lt_matmul(Context& ctx, const char* op, const LtCall& c, bool quiet = false) {
  Context::Impl& impl = ctx.impl();
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t rc = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  auto set_desc = [&](cublasLtMatmulDescAttributes_t attr, const void* value, size_t size) {
    if (rc == CUBLAS_STATUS_SUCCESS) rc = cublasLtMatmulDescSetAttribute(desc, attr, value, size);
  };
  const cublasOperation_t ta = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  set_desc(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof c.epilogue);
  if (c.bias) {
    set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof c.bias);
    set_desc(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c.bias_type, sizeof c.bias_type);
  }
  if (c.aux) {
    const int64_t aux_ld = c.m;
    set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c.aux, sizeof c.aux);
    set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  }
  // Layouts of the stored matrices (before op): A is (k, m) when transposed, else (m, k).
  if (rc == CUBLAS_STATUS_SUCCESS)
    rc = cublasLtMatrixLayoutCreate(&la, c.ab_type, c.trans_a ? c.k : c.m, c.trans_a ? c.m : c.k,
                                    c.lda);
  if (rc == CUBLAS_STATUS_SUCCESS)
    rc = cublasLtMatrixLayoutCreate(&lb, c.ab_type, c.trans_b ? c.n : c.k, c.trans_b ? c.k : c.n,
                                    c.ldb);
  if (rc == CUBLAS_STATUS_SUCCESS) rc = cublasLtMatrixLayoutCreate(&ld, c.d_type, c.m, c.n, c.ldd);
  if (rc == CUBLAS_STATUS_SUCCESS) rc = cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t workspace = kLtWorkspaceBytes;
  if (rc == CUBLAS_STATUS_SUCCESS)
    rc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspace, sizeof workspace);
  // The buffers' actual alignment (cuBLASLt assumes 256 bytes unless told): an MoE expert's
  // block of rows starts at any row, and must not get an algorithm that needs more.
  auto alignment = [](const void* p) {
    uint32_t bytes = 256;
    while (bytes > 1 && reinterpret_cast<uintptr_t>(p) % bytes != 0) bytes /= 2;
    return bytes;
  };
  const uint32_t align_a = alignment(c.A), align_b = alignment(c.B), align_d = alignment(c.D);
  for (const auto& [attr, value] :
       {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}})
    if (rc == CUBLAS_STATUS_SUCCESS)
      rc = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (rc == CUBLAS_STATUS_SUCCESS)
    rc = cublasLtMatmulAlgoGetHeuristic(impl.lt, desc, la, lb, ld, ld, pref, 1, &heuristic, &found);
  if (rc == CUBLAS_STATUS_SUCCESS && found == 0) rc = CUBLAS_STATUS_NOT_SUPPORTED;
  const float alpha = 1.0f;
  if (rc == CUBLAS_STATUS_SUCCESS)
    rc = cublasLtMatmul(impl.lt, desc, &alpha, c.A, la, c.B, lb, &c.beta, c.D, ld, c.D, ld,
                        &heuristic.algo, impl.lt_workspace, kLtWorkspaceBytes, impl.stream);
  if (rc != CUBLAS_STATUS_SUCCESS && !quiet)
    ctx.record_error(std::string(op) + ": cuBLASLt " + cublasLtGetStatusString(rc) + " (m " +
                     std::to_string(c.m) + ", n " + std::to_string(c.n) + ", k " +
                     std::to_string(c.k) + ")");
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (desc) cublasLtMatmulDescDestroy(desc);
  return rc;
}

template <typename T>
void forward(Context& ctx, T* out, T* pre_gelu, const T* inp, const T* weight, const T* bias, int N,
             int C, int OC, bool gelu) {
  LtCall c;
  c.trans_a = true;  // weight stored (C, OC) column-major, used as (OC, C)
  c.m = OC, c.n = N, c.k = C;
  c.A = weight, c.lda = C;
  c.B = inp, c.ldb = C;
  c.D = out, c.ldd = OC;
  c.ab_type = c.d_type = c.bias_type = data_type<T>();
  c.bias = bias;
  if (gelu && pre_gelu) {
    c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    c.aux = pre_gelu;
  } else if (gelu) {
    c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  } else if (bias) {
    c.epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  if (c.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
    lt_matmul(ctx, "matmul_forward", c);
    return;
  }
  const cublasStatus_t fused = lt_matmul(ctx, "matmul_forward", c, /*quiet=*/true);
  if (fused == CUBLAS_STATUS_SUCCESS) return;
  if (fused != CUBLAS_STATUS_NOT_SUPPORTED) {
    ctx.record_error(std::string("matmul_forward: cuBLASLt ") + cublasLtGetStatusString(fused));
    return;
  }
  // No cuBLASLt kernel for this epilogue / type / shape: the plain GEMM, then our kernels.
  T* gemm_out = gelu && pre_gelu ? pre_gelu : out;
  c.D = gemm_out;
  c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  c.bias = nullptr;
  c.aux = nullptr;
  lt_matmul(ctx, "matmul_forward", c);
  if (bias) add_bias(ctx, gemm_out, bias, N, OC);
  if (gelu) gelu_forward(ctx, out, gemm_out, static_cast<size_t>(N) * OC);
}

template <typename T>
void backward(Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
              const T* weight, int N, int C, int OC) {
  if (dinp) {  // dinp^T (C, N) = weight^T (C, OC) . dout^T (OC, N)
    LtCall c;
    c.m = C, c.n = N, c.k = OC;
    c.A = weight, c.lda = C;
    c.B = dout, c.ldb = OC;
    c.D = dinp, c.ldd = C;
    c.ab_type = c.d_type = data_type<T>();
    lt_matmul(ctx, "matmul_backward (dinp)", c);
  }
  if (dweight) {  // dweight^T (C, OC) += inp^T (C, N) . dout (N, OC); fp32 result
    LtCall c;
    c.trans_b = true;
    c.m = C, c.n = OC, c.k = N;
    c.A = inp, c.lda = C;
    c.B = dout, c.ldb = OC;
    c.D = dweight, c.ldd = C;
    c.ab_type = data_type<T>();
    c.d_type = CUDA_R_32F;
    c.beta = 1.0f;
    lt_matmul(ctx, "matmul_backward (dweight)", c);
  }
  if (dbias) {  // column sums over R row blocks, partials in the context's scratch
    const size_t scratch_floats = kScratchDoubles * sizeof(double) / sizeof(float);
    const int R = column_split(N, OC, 1, scratch_floats);
    float* partial = static_cast<size_t>(R) * OC <= scratch_floats
                         ? reinterpret_cast<float*>(ctx.impl().scratch)
                         : nullptr;
    bias_grad_kernel<<<dim3((OC + 31) / 32, R), dim3(32, 8), 0, stream_of(ctx)>>>(
        partial, dbias, dev(dout), N, OC, (N + R - 1) / R);
    check_launch(ctx, "matmul_backward (dbias)");
    if (partial) {
      column_totals_kernel<<<(OC + 255) / 256, 256, 0, stream_of(ctx)>>>(dbias, nullptr, partial, R,
                                                                         OC);
      check_launch(ctx, "matmul_backward (dbias totals)");
    }
  }
}

template <typename T>
void launch_add_bias(Context& ctx, T* out, const T* bias, int N, int OC) {
  const size_t total = static_cast<size_t>(N) * OC;
  add_bias_kernel<<<blocks_for(total, 256), 256, 0, stream_of(ctx)>>>(dev(out), dev(bias), total,
                                                                      OC);
  check_launch(ctx, "add_bias");
}

}  // namespace

void matmul_forward(Context& ctx, float* out, float* pre_gelu, const float* inp,
                    const float* weight, const float* bias, int N, int C, int OC, bool gelu) {
  forward(ctx, out, pre_gelu, inp, weight, bias, N, C, OC, gelu);
}
void matmul_forward(Context& ctx, bf16* out, bf16* pre_gelu, const bf16* inp, const bf16* weight,
                    const bf16* bias, int N, int C, int OC, bool gelu) {
  forward(ctx, out, pre_gelu, inp, weight, bias, N, C, OC, gelu);
}
void matmul_forward(Context& ctx, fp16* out, fp16* pre_gelu, const fp16* inp, const fp16* weight,
                    const fp16* bias, int N, int C, int OC, bool gelu) {
  forward(ctx, out, pre_gelu, inp, weight, bias, N, C, OC, gelu);
}
void matmul_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  backward(ctx, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void matmul_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC) {
  backward(ctx, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void matmul_backward(Context& ctx, fp16* dinp, float* dweight, float* dbias, const fp16* dout,
                     const fp16* inp, const fp16* weight, int N, int C, int OC) {
  backward(ctx, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void add_bias(Context& ctx, float* out, const float* bias, int N, int OC) {
  launch_add_bias(ctx, out, bias, N, OC);
}
void add_bias(Context& ctx, bf16* out, const bf16* bias, int N, int OC) {
  launch_add_bias(ctx, out, bias, N, OC);
}
void add_bias(Context& ctx, fp16* out, const fp16* bias, int N, int OC) {
  launch_add_bias(ctx, out, bias, N, OC);
}

}  // namespace lattice::kernels::cuda
