// Token + learned position embedding (GPT-2). The backward scatter is split by channel
// ranges across threads, so every gradient element is summed in token order: deterministic.
// positions (B, T), when given, replace t as the row of wpe (packed documents, kernels.h).
#include <omp.h>

#include <algorithm>

#include "lattice/kernels.h"
#include "parallel.h"

LATTICE_ISA_BEGIN

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                       int C, int vocab_begin, int vocab_end, const int32_t* positions) {
#pragma omp parallel for schedule(static) if (size_t(B) * T_ * C >= cpu::kMinParallelWork)
  for (int bt = 0; bt < B * T_; bt++) {
    const int token = tokens[bt];
    T* o = out + static_cast<size_t>(bt) * C;
    if (token < vocab_begin || token >= vocab_end) {
      std::fill(o, o + C, T(0));
    } else {
      const T* w = wte + static_cast<size_t>(token - vocab_begin) * C;
      if (wpe) {
        const int t = positions ? positions[bt] : bt % T_;
        const T* p = wpe + static_cast<size_t>(t) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = w[c] + p[c];
      } else {
        std::copy(w, w + C, o);
      }
    }
  }
}

template <typename T>
void position_embedding_forward(T* out, const T* wpe, int B, int T_, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T_; bt++) {
    const T* p = wpe + static_cast<size_t>(bt % T_) * C;
    T* o = out + static_cast<size_t>(bt) * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] += p[c];
  }
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_,
                        int C, int vocab_begin, int vocab_end, const int32_t* positions) {
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int c0 = static_cast<int>(static_cast<long>(C) * id / nt);
    const int c1 = static_cast<int>(static_cast<long>(C) * (id + 1) / nt);
    for (int bt = 0; bt < B * T_; bt++) {
      const T* d = dout + static_cast<size_t>(bt) * C;
      const int token = tokens[bt];
      if (dwte && token >= vocab_begin && token < vocab_end) {
        T* w = dwte + static_cast<size_t>(token - vocab_begin) * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) w[c] += d[c];
      }
      if (dwpe) {
        T* p = dwpe + static_cast<size_t>(positions ? positions[bt] : bt % T_) * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) p[c] += d[c];
      }
    }
  }
}

template void embedding_forward(float*, const int32_t*, const float*, const float*, int, int, int,
                                int, int, const int32_t*);
template void embedding_forward(double*, const int32_t*, const double*, const double*, int, int,
                                int, int, int, const int32_t*);
template void position_embedding_forward(float*, const float*, int, int, int);
template void position_embedding_forward(double*, const double*, int, int, int);
template void embedding_backward(float*, float*, const float*, const int32_t*, int, int, int, int,
                                 int, const int32_t*);
template void embedding_backward(double*, double*, const double*, const int32_t*, int, int, int,
                                 int, int, const int32_t*);

LATTICE_ISA_END
