// BatchedGemm (model/batched_gemm.h): the attention's batched products straight into BLAS,
// against LibTorch's bmm / baddbmm_ (bitwise for float32, the same BLAS routine per item) and a
// float64 composition, over the views the attention passes (narrowed rows, transposed operands).
#include "model/batched_gemm.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "tests/model/test_util.h"

namespace rdattn::model {
namespace {

using testing::MaxRelDiff;

struct Case {
  bool ta, tb;  // a / b given as the transpose of a contiguous tensor (column-major)
  int64_t m, k, n;
};

// a [N,m,k] and b [N,k,n], each either contiguous or the transpose of a contiguous tensor, and
// both narrowed from larger tensors (as the attention's k.narrow(1, 0, r1).transpose(1, 2)).
std::pair<at::Tensor, at::Tensor> Operands(const Case& c, at::ScalarType dt, at::Generator& gen) {
  const auto opt = at::TensorOptions().dtype(dt);
  const int64_t N = 3, extra = 5;
  const at::Tensor a =
      c.ta ? at::randn({N, c.k + extra, c.m}, gen, opt).narrow(1, 2, c.k).transpose(1, 2)
           : at::randn({N, c.m + extra, c.k}, gen, opt).narrow(1, 1, c.m);
  const at::Tensor b =
      c.tb ? at::randn({N, c.n + extra, c.k}, gen, opt).narrow(1, 3, c.n).transpose(1, 2)
           : at::randn({N, c.k + extra, c.n}, gen, opt).narrow(1, 0, c.k);
  return {a, b};
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, k, n] :
           std::vector<std::array<int64_t, 3>>{{64, 64, 192}, {7, 1, 5}, {1, 9, 1}, {33, 17, 64}})
        out.push_back({ta, tb, m, k, n});
  return out;
}

// LibTorch 1.13 takes its own loops below m·k·n = 400 and BLAS from there: the bits are BLAS's
// only in the second case (the attention's products are all far above it).
bool Blas(const Case& c) { return c.m * c.k * c.n >= 400; }

// How many BatchedGemm calls took each path while f ran: every comparison below says which path
// it compared (both paths give the same bits, so a layout check that sent everything to
// LibTorch would otherwise pass unnoticed, as it once did).
template <typename F>
BatchedGemmCalls CallsDuring(F&& f) {
  const BatchedGemmCalls before = BatchedGemmCallCounts();
  f();
  return BatchedGemmCallCounts() - before;
}

TEST(BatchedGemmTest, TheDirectPathIsAvailableWithLibTorchsBlas) {
  // Debian's LibTorch does its CPU products in the system BLAS, which exports sgemm_/dgemm_:
  // without them every test below would compare the fallback with itself.
  EXPECT_TRUE(BatchedGemmDirect());
}

TEST(BatchedGemmTest, Float32WritesTheBitsOfBmmOut) {
  at::Generator gen = at::detail::createCPUGenerator(21);
  for (const Case& c : Cases()) {
    const auto [a, b] = Operands(c, at::kFloat, gen);
    // c narrowed from a wider buffer: its rows have a leading dimension larger than n.
    at::Tensor wide = at::full({3, c.m + 2, c.n + 4}, 7.0f);
    at::Tensor out = wide.narrow(1, 1, c.m).narrow(2, 2, c.n);
    const BatchedGemmCalls calls = CallsDuring([&] { BatchedGemm(a, b, out, false); });
    const at::Tensor want = at::bmm(a, b);
    const std::string what = "ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) +
                             " m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                             " n=" + std::to_string(c.n);
    EXPECT_EQ(calls.direct, 1) << what;
    EXPECT_EQ(calls.libtorch, 0) << what;
    if (Blas(c)) {
      EXPECT_TRUE(at::equal(out, want)) << what << " max rel " << MaxRelDiff(out, want);
    } else {
      EXPECT_LE(MaxRelDiff(out, want), 1e-6) << what;
    }
    // Nothing outside the view was touched, and the old contents did not leak in (beta = 0).
    at::Tensor outside = wide.clone();
    outside.narrow(1, 1, c.m).narrow(2, 2, c.n).fill_(7.0f);
    EXPECT_TRUE(at::equal(outside, at::full_like(wide, 7.0f))) << what;
  }
}

TEST(BatchedGemmTest, Float32AccumulatesTheBitsOfBaddbmm) {
  at::Generator gen = at::detail::createCPUGenerator(22);
  for (const Case& c : Cases()) {
    const auto [a, b] = Operands(c, at::kFloat, gen);
    const at::Tensor base = at::randn({3, c.m, c.n}, gen, at::TensorOptions().dtype(at::kFloat));
    at::Tensor out = base.clone();
    const BatchedGemmCalls calls = CallsDuring([&] { BatchedGemm(a, b, out, true); });
    EXPECT_EQ(calls.direct, 1) << "ta=" << c.ta << " tb=" << c.tb << " m=" << c.m;
    EXPECT_EQ(calls.libtorch, 0) << "ta=" << c.ta << " tb=" << c.tb << " m=" << c.m;
    at::Tensor want = base.clone();
    want.baddbmm_(a, b);
    if (Blas(c)) {
      EXPECT_TRUE(at::equal(out, want)) << "ta=" << c.ta << " tb=" << c.tb << " m=" << c.m
                                        << " max rel " << MaxRelDiff(out, want);
    } else {
      EXPECT_LE(MaxRelDiff(out, want), 1e-6) << "ta=" << c.ta << " tb=" << c.tb << " m=" << c.m;
    }
  }
}

TEST(BatchedGemmTest, AlphaScalesEachProduct) {
  // The attention passes its scale as alpha: with a power of two (1/8, d = 64) the result is
  // bitwise (a·b)·α and (a·α)·b; any α accumulates as baddbmm_(a, b, 1, α).
  at::Generator gen = at::detail::createCPUGenerator(26);
  for (const Case& c : Cases()) {
    if (!Blas(c)) continue;
    const auto [a, b] = Operands(c, at::kFloat, gen);
    at::Tensor out = at::empty({3, c.m, c.n});
    EXPECT_EQ(CallsDuring([&] { BatchedGemm(a, b, out, false, 0.125); }).direct, 1);
    EXPECT_TRUE(at::equal(out, at::bmm(a, b) * 0.125)) << "ta=" << c.ta << " tb=" << c.tb;
    EXPECT_TRUE(at::equal(out, at::bmm(a * 0.125, b))) << "ta=" << c.ta << " tb=" << c.tb;
    const at::Tensor base = at::randn({3, c.m, c.n}, gen, at::TensorOptions().dtype(at::kFloat));
    at::Tensor acc = base.clone();
    EXPECT_EQ(CallsDuring([&] { BatchedGemm(a, b, acc, true, 0.3); }).direct, 1);
    at::Tensor want = base.clone();
    want.baddbmm_(a, b, 1, 0.3);
    EXPECT_TRUE(at::equal(acc, want)) << "ta=" << c.ta << " tb=" << c.tb;
  }
  // The fallback applies it too (bf16 has no BLAS gemm here); integer products take none.
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  const at::Tensor ah = at::randn({2, 4, 6}, gen).to(at::kBFloat16);
  const at::Tensor bh = at::randn({2, 6, 3}, gen).to(at::kBFloat16);
  at::Tensor oh = at::empty({2, 4, 3}, bf16);
  EXPECT_EQ(CallsDuring([&] { BatchedGemm(ah, bh, oh, false, 0.25); }).libtorch, 1);
  EXPECT_TRUE(at::equal(oh, at::bmm(ah, bh) * 0.25));
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  at::Tensor oi = at::empty({2, 4, 3}, i64);
  EXPECT_THROW(BatchedGemm(at::ones({2, 4, 6}, i64), at::ones({2, 6, 3}, i64), oi, false, 2.0),
               c10::Error);
}

TEST(BatchedGemmTest, Float64MatchesAnElementwiseComposition) {
  // Independent of BLAS: Σ_k a[i,m,k]·b[i,k,n] as a broadcast product and a sum.
  at::Generator gen = at::detail::createCPUGenerator(23);
  for (const Case& c : Cases()) {
    const auto [a, b] = Operands(c, at::kDouble, gen);
    const at::Tensor plain = (a.unsqueeze(3) * b.unsqueeze(1)).sum(2);
    at::Tensor out = at::empty({3, c.m, c.n}, at::TensorOptions().dtype(at::kDouble));
    EXPECT_EQ(CallsDuring([&] { BatchedGemm(a, b, out, false); }).direct, 1);
    EXPECT_LE(MaxRelDiff(out, plain), 1e-13) << "write, ta=" << c.ta << " tb=" << c.tb;
    const at::Tensor base = at::randn({3, c.m, c.n}, gen, at::TensorOptions().dtype(at::kDouble));
    at::Tensor acc = base.clone();
    EXPECT_EQ(CallsDuring([&] { BatchedGemm(a, b, acc, true); }).direct, 1);
    EXPECT_LE(MaxRelDiff(acc, base + plain), 1e-13) << "accumulate, ta=" << c.ta << " tb=" << c.tb;
  }
}

TEST(BatchedGemmTest, SeveralThreadsGiveTheSameProduct) {
  // Items run in parallel; each is one gemm, whose own bits depend on BLAS's kernels and
  // threading (as at::mm's do: OpenBLAS's Haswell kernels round differently at 1 and 3
  // threads), so the comparison is to a tolerance.
  at::Generator gen = at::detail::createCPUGenerator(24);
  const Case c{true, false, 64, 256, 64};
  const auto [a, b] = Operands(c, at::kFloat, gen);
  const at::Tensor want = (a.to(at::kDouble).unsqueeze(3) * b.to(at::kDouble).unsqueeze(1)).sum(2);
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    at::Tensor out = at::empty({3, c.m, c.n});
    BatchedGemm(a, b, out, false);
    EXPECT_LE((out.to(at::kDouble) - want).abs().max().item<double>(), 1e-4) << threads;
  }
  at::set_num_threads(before);
}

TEST(BatchedGemmTest, LayoutsBlasCannotTakeGoThroughLibTorch) {
  at::Generator gen = at::detail::createCPUGenerator(25);
  const auto opt = at::TensorOptions().dtype(at::kFloat);
  // No unit stride in a's last two dimensions: every other element of a wider row.
  const at::Tensor a = at::randn({2, 4, 12}, gen, opt).slice(2, 0, 12, 2);  // [2,4,6]
  const at::Tensor b = at::randn({2, 6, 3}, gen, opt);
  at::Tensor out = at::empty({2, 4, 3}, opt);
  EXPECT_EQ(CallsDuring([&] { BatchedGemm(a, b, out, false); }).libtorch, 1);
  EXPECT_TRUE(at::equal(out, at::bmm(a, b)));
  // A column-major output, and a dtype BLAS has no gemm for here (int64): also LibTorch's.
  at::Tensor out_t = at::empty({2, 3, 4}, opt).transpose(1, 2);
  EXPECT_EQ(CallsDuring([&] { BatchedGemm(a.contiguous(), b, out_t, false); }).libtorch, 1);
  EXPECT_TRUE(at::equal(out_t, at::bmm(a.contiguous(), b)));
  // An output whose items overlap (a zero batch stride): LibTorch's too.
  at::Tensor out_e = at::empty({1, 4, 3}, opt).expand({2, 4, 3});
  const BatchedGemmCalls expanded = CallsDuring([&] {
    try {
      BatchedGemm(a.contiguous(), b, out_e, false);
    } catch (const c10::Error&) {  // bmm_out's own refusal is the expected outcome too
    }
  });
  EXPECT_EQ(expanded.direct, 0);
  EXPECT_EQ(expanded.libtorch, 1);
  const at::Tensor ai = at::randint(-3, 3, {2, 4, 6}, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor bi = at::randint(-3, 3, {2, 6, 3}, gen, at::TensorOptions().dtype(at::kLong));
  at::Tensor oi = at::empty({2, 4, 3}, at::TensorOptions().dtype(at::kLong));
  EXPECT_EQ(CallsDuring([&] { BatchedGemm(ai, bi, oi, false); }).libtorch, 1);
  EXPECT_TRUE(at::equal(oi, at::bmm(ai, bi)));
}

TEST(BatchedGemmTest, DisjointViewsOfOneStorageTakeTheDirectPath) {
  // The attention's operands and outputs are narrowed and transposed views, some of one
  // buffer: BLAS can take them as long as their memory does not meet, and must not otherwise.
  at::Generator gen = at::detail::createCPUGenerator(29);
  const at::Tensor buf = at::randn({3, 40, 16}, gen);
  const at::Tensor a = buf.narrow(1, 0, 8);                   // rows 0–7
  const at::Tensor b = buf.narrow(1, 8, 16).transpose(1, 2);  // rows 8–23, as [16 cols, 16]
  const at::Tensor want = at::bmm(a, b.narrow(1, 0, 16));
  at::Tensor c = buf.clone().narrow(1, 24, 8);  // a copy: rows 24–31 of another storage
  EXPECT_EQ(CallsDuring([&] { BatchedGemm(a, b, c, false); }).direct, 1);
  EXPECT_TRUE(at::equal(c, want));
  // The same rows 24–31 of the inputs' own storage: disjoint from rows 0–23 within each
  // item, but item 0's output range lies inside item 1's input range: LibTorch's.
  at::Tensor shared = buf.clone();
  const at::Tensor sa = shared.narrow(1, 0, 8), sb = shared.narrow(1, 8, 16).transpose(1, 2);
  at::Tensor sc = shared.narrow(1, 24, 8);
  const at::Tensor swant = at::bmm(sa, sb);
  EXPECT_EQ(CallsDuring([&] { BatchedGemm(sa, sb, sc, false); }).libtorch, 1);
  EXPECT_TRUE(at::equal(sc, swant));
  // Separate items of one buffer (inputs in the first half, output in the second): direct.
  at::Tensor halves = at::randn({6, 8, 8}, gen);
  const at::Tensor ha = halves.narrow(0, 0, 3), hb = halves.narrow(0, 0, 3).transpose(1, 2);
  const at::Tensor hwant = at::bmm(ha, hb);
  at::Tensor hc = halves.narrow(0, 3, 3);
  EXPECT_EQ(CallsDuring([&] { BatchedGemm(ha, hb, hc, false); }).direct, 1);
  EXPECT_TRUE(at::equal(hc, hwant));
}

TEST(BatchedGemmTest, AnOutputThatOverlapsAnInputIsLibTorchsCase) {
  // c written over a (same storage): BLAS cannot take it; BatchedGemm does what bmm_out does
  // with it, an error or the same values.
  at::Generator gen = at::detail::createCPUGenerator(28);
  const at::Tensor base = at::randn({2, 8, 8}, gen);
  const at::Tensor b = at::randn({2, 8, 8}, gen);
  auto attempt = [&](bool ours) -> std::optional<at::Tensor> {
    at::Tensor a = base.clone();
    at::Tensor c = a;  // the same memory
    try {
      if (ours) {
        const BatchedGemmCalls calls = CallsDuring([&] { BatchedGemm(a, b, c, false); });
        EXPECT_EQ(calls.direct, 0);
      } else {
        at::bmm_out(c, a, b);
      }
    } catch (const c10::Error&) {
      return std::nullopt;
    }
    return c;
  };
  const std::optional<at::Tensor> ours = attempt(true), aten = attempt(false);
  ASSERT_EQ(ours.has_value(), aten.has_value());
  if (ours.has_value()) {
    EXPECT_TRUE(at::equal(*ours, *aten));
  }
}

TEST(BatchedGemmTest, MismatchedShapesAreRejectedWithTheirSizes) {
  at::Tensor out = at::empty({2, 4, 3});
  try {
    BatchedGemm(at::zeros({2, 4, 5}), at::zeros({2, 6, 3}), out, false);
    FAIL() << "no error for k 5 against 6";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("[2, 4, 5]"), std::string::npos)
        << e.what_without_backtrace();
  }
  EXPECT_THROW(BatchedGemm(at::zeros({4, 5}), at::zeros({2, 5, 3}), out, false), c10::Error);
}

}  // namespace
}  // namespace rdattn::model
