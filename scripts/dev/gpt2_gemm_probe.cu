// GPT-2 small's products (8 x 256 rows) through cuBLASLt as tc's blaslt.cpp calls them: every
// algorithm the heuristic proposes (up to 32) timed, with the workspace at 0 / 4 / 32 MiB; the LM
// head with rows of 50257 floats (unaligned), padded rows (aligned) and as tc's row groups.
// nvcc -O2 -arch=sm_90 scripts/dev/gpt2_gemm_probe.cu -lcublasLt -o gemm_probe; ./gemm_probe [head]
// (head: only the LM head as row groups of widths a multiple of 4 and of 16, and a 15-column tail)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                               \
  do {                                                                      \
    auto e_ = (x);                                                          \
    if ((int)e_ != 0) {                                                     \
      std::printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__);      \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

cublasLtHandle_t H;
void* WS;
cudaEvent_t E0, E1;

struct Prob {
  const char* name;
  int m, n, k;
  long ldo;
  cublasLtEpilogue_t ep;
  bool bias, residual;
};

struct Plan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
};

Plan make_plan(const Prob& p, long lda_x, const float* bias) {
  Plan pl;
  CK(cublasLtMatmulDescCreate(&pl.desc, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CK(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CK(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.ep, sizeof p.ep));
  CK(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  CK(cublasLtMatrixLayoutCreate(&pl.la, CUDA_R_32F, p.k, p.n, p.k));  // W [n, k] row-major = k x n col-major, op T
  CK(cublasLtMatrixLayoutCreate(&pl.lb, CUDA_R_32F, p.k, p.m, lda_x));
  CK(cublasLtMatrixLayoutCreate(&pl.ld, CUDA_R_32F, p.n, p.m, p.ldo));
  return pl;
}

std::vector<cublasLtMatmulHeuristicResult_t> heuristics(const Plan& pl, size_t ws, int want, int align_d) {
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  uint32_t a16 = 16, ad = align_d;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a16, sizeof a16);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a16, sizeof a16);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad);
  std::vector<cublasLtMatmulHeuristicResult_t> r(want);
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(H, pl.desc, pl.la, pl.lb, pl.ld, pl.ld, pref, want, r.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) found = 0;
  r.resize(found);
  return r;
}

float time_algo(const Plan& pl, const cublasLtMatmulAlgo_t* algo, size_t ws, const float* A, const float* B, const float* C,
                float* D, float beta, int reps) {
  const float alpha = 1;
  auto run = [&] { return cublasLtMatmul(H, pl.desc, &alpha, A, pl.la, B, pl.lb, &beta, C, pl.ld, D, pl.ld, algo, WS, ws, 0); };
  for (int i = 0; i < 2; i++)
    if (run() != CUBLAS_STATUS_SUCCESS) return -1;
  CK(cudaEventRecord(E0));
  for (int i = 0; i < reps; i++) run();
  CK(cudaEventRecord(E1));
  CK(cudaEventSynchronize(E1));
  float ms;
  CK(cudaEventElapsedTime(&ms, E0, E1));
  return ms * 1000 / reps;  // us
}

void describe(const cublasLtMatmulAlgo_t& a, char* out) {
  int id = 0, tile = 0, stages = 0, splitk = 0, swz = 0, cluster = 0;
  size_t w;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
  std::sprintf(out, "id%d tile%d st%d sk%d sw%d cl%d", id, tile, stages, splitk, swz, cluster);
}

// Every candidate of the heuristic timed: first's time, best's time and rank.
float probe(const Prob& p, const float* x, long ldx, const float* w, const float* bias, const float* res, float* out,
            int align_d, bool verbose) {
  Plan pl = make_plan(p, ldx, p.bias ? bias : nullptr);
  const double gflop = 2.0 * p.m * p.n * p.k / 1e9;
  float best_all = 1e30f;
  for (size_t ws : {(size_t)0, (size_t)4 << 20, (size_t)32 << 20}) {
    auto cands = heuristics(pl, ws, 32, align_d);
    if (cands.empty()) {
      std::printf("%-22s ws %5zuK: no algorithm\n", p.name, ws >> 10);
      continue;
    }
    float first = -1, best = 1e30f;
    int best_i = -1;
    std::vector<float> t(cands.size());
    for (size_t i = 0; i < cands.size(); i++) {
      t[i] = time_algo(pl, &cands[i].algo, cands[i].workspaceSize, w, x, p.residual ? res : out, out, p.residual ? 1.f : 0.f, 20);
      if (i == 0) first = t[i];
      if (t[i] > 0 && t[i] < best) best = t[i], best_i = (int)i;
    }
    char d0[128], db[128];
    describe(cands[0].algo, d0);
    describe(cands[best_i].algo, db);
    std::printf("%-22s ws %5zuK: %2zu cands; first %7.1f us (%5.1f TF/s) [%s]; best #%d %7.1f us (%5.1f TF/s) [%s ws %zuK]\n",
                p.name, ws >> 10, cands.size(), first, gflop / first * 1e3, d0, best_i, best, gflop / best * 1e3, db,
                cands[best_i].workspaceSize >> 10);
    if (verbose && ws == ((size_t)32 << 20))
      for (size_t i = 0; i < cands.size(); i++) {
        char di[128];
        describe(cands[i].algo, di);
        std::printf("    #%zu %7.1f us [%s ws %zuK]\n", i, t[i], di, cands[i].workspaceSize >> 10);
      }
    best_all = std::min(best_all, best);
  }
  return best_all;
}

__global__ void copy_rows(const float* __restrict__ in, float* __restrict__ out, long rows, long n, long ldi) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < rows * n; i += (long)gridDim.x * blockDim.x)
    out[i] = in[(i / n) * ldi + i % n];
}

int main(int argc, char** argv) {
  const bool head_only = argc > 1;
  CK(cublasLtCreate(&H));
  CK(cudaMalloc(&WS, 32 << 20));
  CK(cudaEventCreate(&E0));
  CK(cudaEventCreate(&E1));
  const int M = 2048, V = 50257;
  float *x, *w, *bias, *res, *out;
  CK(cudaMalloc(&x, sizeof(float) * M * 3072));
  CK(cudaMalloc(&w, sizeof(float) * (size_t)V * 768));
  CK(cudaMalloc(&bias, sizeof(float) * 4096));
  CK(cudaMalloc(&res, sizeof(float) * M * 3072));
  CK(cudaMalloc(&out, sizeof(float) * (size_t)M * 50264));
  {
    std::vector<float> h((size_t)V * 768);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
    CK(cudaMemcpy(w, h.data(), sizeof(float) * h.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x, h.data(), sizeof(float) * M * 3072, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(res, h.data(), sizeof(float) * M * 3072, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bias, h.data(), sizeof(float) * 4096, cudaMemcpyHostToDevice));
  }
  Prob layer[] = {{"qkv 768->2304 +b", M, 2304, 768, 2304, CUBLASLT_EPILOGUE_BIAS, true, false},
                  {"attn proj 768 +b+r", M, 768, 768, 768, CUBLASLT_EPILOGUE_BIAS, true, true},
                  {"fc 768->3072 +b+gelu", M, 3072, 768, 3072, CUBLASLT_EPILOGUE_GELU_BIAS, true, false},
                  {"proj 3072->768 +b+r", M, 768, 3072, 768, CUBLASLT_EPILOGUE_BIAS, true, true}};
  if (head_only) {
    // group products of widths 50257 - c_j rounded down to a multiple of 4 and of 16
    for (int mult : {4, 16}) {
      const int first[4] = {0, 3, 2, 1};
      float sum = 0;
      for (int j = 0; j < 4; j++) {
        char name[64];
        const int wdt = (V - first[j]) / mult * mult;
        std::sprintf(name, "group %d width %d", j, wdt);
        Prob g = {strdup(name), M / 4, wdt, 768, 4L * V, CUBLASLT_EPILOGUE_DEFAULT, false, false};
        sum += probe(g, x + j * 768, 4 * 768, w + first[j] * 768, bias, res, out + (size_t)j * V + first[j], 16, false);
      }
      std::printf("groups of widths a multiple of %d: best sum %.1f us\n", mult, sum);
    }
    Prob tail = {"tail 15 cols", M, 15, 768, V, CUBLASLT_EPILOGUE_DEFAULT, false, false};
    probe(tail, x, 768, w + (V - 15) * 768, bias, res, out + V - 15, 4, false);
    return 0;
  }
  float layer_sum = 0;
  for (const Prob& p : layer) layer_sum += probe(p, x, p.k, w, bias, res, out, 16, true);
  std::printf("per layer best sum %.1f us, x12 = %.3f ms\n", layer_sum, layer_sum * 12 / 1000);
  // LM head
  Prob un = {"head ldo 50257", M, V, 768, V, CUBLASLT_EPILOGUE_DEFAULT, false, false};
  probe(un, x, 768, w, bias, res, out, 4, false);
  Prob pad = {"head ldo 50260", M, V, 768, 50260, CUBLASLT_EPILOGUE_DEFAULT, false, false};
  probe(pad, x, 768, w, bias, res, out, 16, true);
  Prob pad2 = {"head ldo 50264", M, V, 768, 50264, CUBLASLT_EPILOGUE_DEFAULT, false, false};
  probe(pad2, x, 768, w, bias, res, out, 16, false);
  Prob pad3 = {"head ldo 50304 n50304", M, 50304, 768, 50304, CUBLASLT_EPILOGUE_DEFAULT, false, false};
  probe(pad3, x, 768, w, bias, res, out, 16, false);
  // tc's row groups: rows j, j+4, ... from column c_j on (out at a 256-byte aligned base)
  float rg = 0;
  const int first[4] = {0, 3, 2, 1};
  Prob narrow = {"head narrow 3 cols", M, 3, 768, V, CUBLASLT_EPILOGUE_DEFAULT, false, false};
  rg += probe(narrow, x, 768, w, bias, res, out, 4, false);
  for (int j = 0; j < 4; j++) {
    char name[64];
    std::sprintf(name, "head group %d", j);
    Prob g = {strdup(name), M / 4, V - first[j], 768, 4L * V, CUBLASLT_EPILOGUE_DEFAULT, false, false};
    rg += probe(g, x + j * 768, 4 * 768, w + first[j] * 768, bias, res, out + (size_t)j * V + first[j], 16, j == 0);
  }
  std::printf("row groups best sum %.1f us\n", rg);
  float* dst;
  CK(cudaMalloc(&dst, sizeof(float) * (size_t)M * V));
  for (int i = 0; i < 3; i++) copy_rows<<<132 * 16, 256>>>(out, dst, M, V, 50260);
  CK(cudaEventRecord(E0));
  for (int i = 0; i < 10; i++) copy_rows<<<132 * 16, 256>>>(out, dst, M, V, 50260);
  CK(cudaEventRecord(E1));
  CK(cudaEventSynchronize(E1));
  float ms;
  CK(cudaEventElapsedTime(&ms, E0, E1));
  std::printf("copy padded -> contiguous logits %.1f us\n", ms * 100);
  return 0;
}
