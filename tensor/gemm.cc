// The CPU GEMM: cache blocking around a register-tiled micro-kernel (the scheme of Goto &
// van de Geijn, "Anatomy of High-Performance Matrix Multiplication", 2008, as in BLIS).
//
// C (M x N) += A (M x K) · B (K x N) is cut into blocks so that each level of the memory
// hierarchy holds the data reused most often at that level:
//
//   for jc in steps of NC over N:            B block  (KC x NC)  ~ L3 / memory stream
//     for pc in steps of KC over K:          pack B(pc:pc+KC, jc:jc+NC) into Bp
//       for ic in steps of MC over M:        pack A(ic:ic+MC, pc:pc+KC) into Ap  (stays in L2)
//         for jr in steps of NR over NC:     one B micro-panel (KC x NR)        (stays in L1)
//           for ir in steps of MR over MC:   one A micro-panel (MR x KC), streamed from L2
//             micro-kernel: C(MR x NR) += Ap panel · Bp panel, accumulators in registers
//
// The micro-kernel keeps an MR x NR tile of C in vector registers for the whole KC loop, so
// each loaded value of A is used NR times and each of B MR times: that ratio is what lets
// the FMA units, not memory, set the speed. Packing copies each block once into the exact
// order the micro-kernel reads (unit stride, zero-padded to whole tiles), which is also
// what lets A and B have any strides: a transposed operand costs only a different packing
// walk. Block sizes per kernel are in gemm_avx512.cc / gemm_avx2.cc, chosen for 32-48 KiB
// L1 and 1-2 MiB L2 per core.
#include "tensor/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/check.h"
#include "tensor/cpu_features.h"
#include "tensor/gemm_kernels.h"

namespace engine {

using detail::MicroKernel;

void gemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B,
                    int64_t rsb, int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double s = accumulate ? C[i * rsc + j * csc] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += double(A[i * rsa + k * csa]) * double(B[k * rsb + j * csb]);
      C[i * rsc + j * csc] = float(s);
    }
  }
}

namespace {

template <int n>
inline void copy_floats(const float* src, float* dst) {
  std::memcpy(dst, src, n * sizeof(float));
}

// Packs rows [0, mc) x cols [0, kc) of A into MR-row micro-panels: panel p holds, for each
// k, the MR values A[p*MR + 0 .. MR-1, k]. Rows past mc are zero so edge tiles need no branch.
void pack_a(int mr, int64_t mc, int64_t kc, const float* A, int64_t rsa, int64_t csa, float* Ap) {
  for (int64_t p = 0; p < mc; p += mr) {
    const int64_t rows = std::min<int64_t>(mr, mc - p);
    if (csa == 1 && rsa != 1 && mr % 8 == 0 && gemm_kernel_supported(GemmKernel::Avx2)) {
      // Row-major A: each row is contiguous along k, exactly the layout a transposed B
      // panel has, so the same 8x8 in-register transpose packs it.
      detail::pack_b_columns_avx2(mr, kc, rows, A + p * rsa, rsa, Ap);
      Ap += kc * mr;
      continue;
    }
    if (rsa == 1 && rows == mr && mr == 8) {  // A stored transposed: each k's 8 rows are contiguous
      for (int64_t k = 0; k < kc; ++k, Ap += mr) copy_floats<8>(A + p + k * csa, Ap);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A + p * rsa + k * csa;
      int64_t i = 0;
      for (; i < rows; ++i) Ap[i] = src[i * rsa];
      for (; i < mr; ++i) Ap[i] = 0.0f;
      Ap += mr;
    }
  }
}

// Packs rows [0, kc) x cols [0, nc) of B into NR-column micro-panels: panel q holds, for
// each k, the NR values B[k, q*NR + 0 .. NR-1]. Columns past nc are zero.
void pack_b(int nr, int64_t kc, int64_t nc, const float* B, int64_t rsb, int64_t csb, float* Bp) {
  for (int64_t q = 0; q < nc; q += nr) {
    const int64_t cols = std::min<int64_t>(nr, nc - q);
    if (rsb == 1 && csb != 1 && nr % 8 == 0 && gemm_kernel_supported(GemmKernel::Avx2)) {
      // B stored transposed (each column contiguous): transpose 8x8 blocks in registers.
      detail::pack_b_columns_avx2(nr, kc, cols, B + q * csb, csb, Bp);
      Bp += kc * nr;
      continue;
    }
    if (rsb == 1 && csb != 1) {
      // The same without AVX2: walk down columns so reads are sequential; the writes land
      // in the panel, which fits in L1.
      for (int64_t j = 0; j < nr; ++j) {
        const float* src = B + (q + j) * csb;
        for (int64_t k = 0; k < kc; ++k) Bp[k * nr + j] = j < cols ? src[k] : 0.0f;
      }
      Bp += kc * nr;
      continue;
    }
    if (csb == 1 && cols == nr && (nr == 32 || nr == 16)) {
      // Whole panels of row-major B: a copy of nr floats per k, of a size known here so the
      // compiler writes it as a few vector moves (a call to memcpy per 128 bytes costs
      // as much as the copy).
      for (int64_t k = 0; k < kc; ++k, Bp += nr) {
        if (nr == 32)
          copy_floats<32>(B + k * rsb + q, Bp);
        else
          copy_floats<16>(B + k * rsb + q, Bp);
      }
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + k * rsb + q * csb;
      int64_t j = 0;
      if (csb == 1) {
        std::memcpy(Bp, src, size_t(cols) * sizeof(float));
        j = cols;
      } else {
        for (; j < cols; ++j) Bp[j] = src[j * csb];
      }
      for (; j < nr; ++j) Bp[j] = 0.0f;
      Bp += nr;
    }
  }
}

// A growable 64-byte-aligned scratch buffer, one per thread, reused across calls.
float* scratch(std::vector<float>& buf, size_t floats) {
  if (buf.size() < floats + 16) buf.resize(floats + 16);
  auto addr = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<float*>((addr + 63) & ~uintptr_t(63));
}

// Whether whole panels of a row-major B (rows rsb floats apart) can be read where they lie
// instead of packed: the kc x NR panel is reused by every A micro-panel, so it must stay in
// L1 without packing. Rows a multiple of 512 bytes apart would fall on a few of L1's 64
// sets and evict each other; a panel over 256 KB would also need more TLB entries than L1's.
// The copy this saves was 5% of the lessons' CNN step (its columns: rows of 196 floats).
bool b_in_place_pays(const MicroKernel& mk, int64_t csb, int64_t rsb, int64_t kc) {
  return mk.run_b_in_place != nullptr && csb == 1 && (rsb * 4) % 512 != 0 && kc * rsb * 4 <= 256 * 1024;
}

const MicroKernel& pick_kernel(GemmKernel which) {
  static const MicroKernel scalar = detail::scalar_micro_kernel();
  static const MicroKernel avx2 = detail::avx2_micro_kernel();
  static const MicroKernel avx512 = detail::avx512_micro_kernel();
  switch (which) {
    case GemmKernel::Scalar: return scalar;
    case GemmKernel::Avx2: return avx2;
    case GemmKernel::Avx512: return avx512;
    case GemmKernel::Auto: break;
  }
  static const MicroKernel& best = gemm_kernel_supported(GemmKernel::Avx512) ? avx512
                                   : gemm_kernel_supported(GemmKernel::Avx2) ? avx2
                                                                             : scalar;
  return best;
}

}  // namespace

bool gemm_kernel_supported(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::Avx512: return cpu_has_avx512();
    case GemmKernel::Avx2: return cpu_has_avx2();
    default: return true;
  }
}

std::string gemm_kernel_name(GemmKernel kernel) { return pick_kernel(kernel).name; }

namespace {

// Where gemm_blocks takes each packed (pc, ic) block of A from: packed on the spot from A
// itself, or handed over from a PackedA.
struct ASource {
  const float* A = nullptr;
  int64_t rsa = 0, csa = 0;
  const PackedA* packed = nullptr;
};

// The blocked product of gemm.cc's opening comment. M, N, K > 0.
void gemm_blocks(const MicroKernel& mk, int64_t M, int64_t N, int64_t K, const ASource& a, const float* B, int64_t rsb,
                 int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate) {
  const int MR = mk.mr, NR = mk.nr;
  thread_local std::vector<float> a_buf, b_buf;
  alignas(64) float tile[16 * 64];  // the largest MR x NR of any kernel
  ENGINE_CHECK(MR * NR <= 16 * 64);

  for (int64_t jc = 0; jc < N; jc += mk.nc) {
    const int64_t nc = std::min<int64_t>(mk.nc, N - jc);
    for (int64_t pc = 0; pc < K; pc += mk.kc) {
      const int64_t kc = std::min<int64_t>(mk.kc, K - pc);
      float* Bp = scratch(b_buf, size_t((nc + NR - 1) / NR * NR * kc));
      const float* b_block = B + pc * rsb + jc * csb;
      // Columns [0, in_place) are read from B itself; only the rest is packed (at its place
      // in Bp, so panel jr is at Bp + jr * kc either way).
      const int64_t in_place = b_in_place_pays(mk, csb, rsb, kc) ? nc / NR * NR : 0;
      pack_b(NR, kc, nc - in_place, b_block + in_place * csb, rsb, csb, Bp + in_place * kc);
      // The first K block overwrites C (unless the caller accumulates); later ones add.
      const bool acc = accumulate || pc > 0;
      for (int64_t ic = 0; ic < M; ic += mk.mc) {
        const int64_t mc = std::min<int64_t>(mk.mc, M - ic);
        const float* Ap;
        if (a.packed) {
          Ap = a.packed->block(pc, ic);
        } else {
          float* packed = scratch(a_buf, size_t((mc + MR - 1) / MR * MR * kc));
          pack_a(MR, mc, kc, a.A + ic * a.rsa + pc * a.csa, a.rsa, a.csa, packed);
          Ap = packed;
        }
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min<int64_t>(NR, nc - jr);
          const float* b_panel = Bp + jr * kc;
          const bool b_here = jr < in_place;  // this panel is B's own columns jr..jr+NR-1
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min<int64_t>(MR, mc - ir);
            const float* a_panel = Ap + ir * kc;
            float* c = C + (ic + ir) * rsc + (jc + jr) * csc;
            const bool whole = mr == MR && nr == NR && csc == 1;  // straight into C
            if (whole && b_here) {
              mk.run_b_in_place(kc, a_panel, b_block + jr, rsb, c, rsc, acc);
              continue;
            }
            if (whole) {
              mk.run(kc, a_panel, b_panel, c, rsc, acc);
              continue;
            }
            // Edge tile or strided C: compute the tile aside (only its first `narrow`
            // columns when the rest are padding), then copy its valid part.
            if (b_here)
              mk.run_b_in_place(kc, a_panel, b_block + jr, rsb, tile, NR, false);
            else if (nr <= mk.narrow)
              mk.run_narrow(kc, a_panel, b_panel, tile, NR, false);
            else
              mk.run(kc, a_panel, b_panel, tile, NR, false);
            for (int64_t i = 0; i < mr; ++i)
              for (int64_t j = 0; j < nr; ++j) {
                float& dst = c[i * rsc + j * csc];
                dst = acc ? dst + tile[i * NR + j] : tile[i * NR + j];
              }
          }
        }
      }
    }
  }
}

// An empty sum (K = 0): C = 0, or C unchanged when accumulating.
void empty_sum(int64_t M, int64_t N, float* C, int64_t rsc, int64_t csc, bool accumulate) {
  if (accumulate) return;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * rsc + j * csc] = 0.0f;
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t rsb,
          int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate, GemmKernel which) {
  ENGINE_REQUIRE(M >= 0 && N >= 0 && K >= 0, "[gemm] negative size M=", M, " N=", N, " K=", K);
  ENGINE_REQUIRE(gemm_kernel_supported(which), "[gemm] kernel ", pick_kernel(which).name,
                 " is not supported here: the CPU's level, capped by ENGINE_CPU_CAPABILITY when set, is ",
                 cpu_level_name(cpu_level()));
  if (M == 0 || N == 0) return;
  if (K == 0) return empty_sum(M, N, C, rsc, csc, accumulate);
  gemm_blocks(pick_kernel(which), M, N, K, ASource{A, rsa, csa, nullptr}, B, rsb, csb, C, rsc, csc, accumulate);
}

PackedA::PackedA(int64_t M, int64_t K, const float* A, int64_t rsa, int64_t csa, GemmKernel kernel)
    : M_(M), K_(K), kernel_(kernel), data_(nullptr) {
  ENGINE_REQUIRE(M >= 0 && K >= 0, "[gemm] negative size M=", M, " K=", K);
  ENGINE_REQUIRE(gemm_kernel_supported(kernel), "[gemm] kernel ", pick_kernel(kernel).name,
                 " is not supported here: the CPU's level, capped by ENGINE_CPU_CAPABILITY when set, is ",
                 cpu_level_name(cpu_level()));
  const MicroKernel& mk = pick_kernel(kernel);
  kc_ = mk.kc, mc_ = mk.mc, blocks_down_ = (M + mc_ - 1) / mc_;
  // Every (pc, ic) block as gemm_blocks packs it, one after another.
  int64_t total = 0;
  for (int64_t pc = 0; pc < K; pc += kc_)
    for (int64_t ic = 0; ic < M; ic += mc_) {
      offsets_.push_back(total);
      total += (std::min<int64_t>(mc_, M - ic) + mk.mr - 1) / mk.mr * mk.mr * std::min<int64_t>(kc_, K - pc);
    }
  float* base = scratch(buf_, size_t(total));
  data_ = base;
  size_t b = 0;
  for (int64_t pc = 0; pc < K; pc += kc_)
    for (int64_t ic = 0; ic < M; ic += mc_, ++b)
      pack_a(mk.mr, std::min<int64_t>(mc_, M - ic), std::min<int64_t>(kc_, K - pc), A + ic * rsa + pc * csa, rsa, csa,
             base + offsets_[b]);
}

const float* PackedA::block(int64_t pc, int64_t ic) const {
  return data_ + offsets_[size_t(pc / kc_ * blocks_down_ + ic / mc_)];
}

void gemm(const PackedA& A, int64_t N, const float* B, int64_t rsb, int64_t csb, float* C, int64_t rsc, int64_t csc,
          bool accumulate) {
  ENGINE_REQUIRE(N >= 0, "[gemm] negative size N=", N);
  if (A.rows() == 0 || N == 0) return;
  if (A.depth() == 0) return empty_sum(A.rows(), N, C, rsc, csc, accumulate);
  gemm_blocks(pick_kernel(A.kernel()), A.rows(), N, A.depth(), ASource{nullptr, 0, 0, &A}, B, rsb, csb, C, rsc, csc,
              accumulate);
}

// ---------------------------------------------------------------------------------------
// The portable micro-kernel: plain C++ that any compiler can at least partly vectorise.

namespace detail {
namespace {
constexpr int kScalarMR = 4, kScalarNR = 8;

void scalar_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t rsc, bool accumulate) {
  float acc[kScalarMR][kScalarNR] = {};
  for (int64_t k = 0; k < kc; ++k, a += kScalarMR, b += kScalarNR)
    for (int i = 0; i < kScalarMR; ++i)
      for (int j = 0; j < kScalarNR; ++j) acc[i][j] += a[i] * b[j];
  for (int i = 0; i < kScalarMR; ++i)
    for (int j = 0; j < kScalarNR; ++j) c[i * rsc + j] = accumulate ? c[i * rsc + j] + acc[i][j] : acc[i][j];
}
}  // namespace

MicroKernel scalar_micro_kernel() {
  return {"scalar 4x8", kScalarMR, kScalarNR, 256, 128, 2048, scalar_kernel, 0, nullptr};
}
}  // namespace detail

}  // namespace engine
