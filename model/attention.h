// The attention sublayer's non-GEMM parts, made cheap for the CPU training step (issue 11):
// RoPE fused with the head split, and causal softmax attention that skips the masked half.
//
// `RopeHeads` is a custom autograd function with a hand-written loop (float and double on the
// CPU): it reads the projection [B,T,H·d] and writes the rotated heads [B,H,T,d] directly, so
// neither the head transpose's copy nor RotateHalf's cat/neg/mul/add temporaries are made, in
// the forward or the backward (whose rotation is the inverse one). Other devices and dtypes take
// the plain composition, `RopeHeadsReference`.
//
// `CausalAttention` is a custom autograd function (any device): the query rows go in blocks, and a
// block's logits, weights and products cover only the keys up to its last row (the masked keys
// would get weight exactly 0), so about 3/8 of the attention GEMMs (two forward, four backward;
// 64-row blocks at T = 256) and of the softmax are never computed, and no [T,T] mask is built. On
// the CPU (float32/float64) a block's causal softmax is one hand-written pass per row over that
// row's own keys only (forward: max, exp, sum, normalise in place on the logits; backward: p·(dp −
// Σ dp·p) in place on dp), exact zeros beyond. It saves the weights per block, as the plain
// composition saves the whole [T,T] matrix. `CausalAttentionReference` is the plain composition it
// is tested against (matmul, scale, masked_fill, softmax, matmul).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string_view>

namespace rdattn::model {

// x: [B,T,H·d] (a Q or K projection), cos/sin: [T,d] RoPE tables (rotate-half convention:
// dimension i pairs with i + d/2). Returns the rotated heads [B,H,T,d], contiguous on the
// fused path.
at::Tensor RopeHeads(const at::Tensor& x, int64_t heads, const at::Tensor& cos,
                     const at::Tensor& sin);
at::Tensor RopeHeadsReference(const at::Tensor& x, int64_t heads, const at::Tensor& cos,
                              const at::Tensor& sin);

// Which kernel CausalAttention runs (process-wide, like SetBatchedGemmDirect):
//   kAuto   (default) LibTorch's scaled_dot_product_attention on CUDA when this LibTorch has it
//           (2.1+), rdattn's own kernel (CausalAttentionFunction below) everywhere else;
//   kRdattn rdattn's own kernel on every device;
//   kSdpa   scaled_dot_product_attention on every device (2.1+; on the CPU its flash kernel).
// SetAttentionKernel(kSdpa) throws c10::Error when the LibTorch has no SDPA. rdattn-train's
// --attention selects it (docs/trainer.md).
enum class AttentionKernel { kAuto, kRdattn, kSdpa };
void SetAttentionKernel(AttentionKernel kernel);
AttentionKernel GetAttentionKernel();
std::string_view AttentionKernelName(AttentionKernel kernel);  // "auto", "rdattn", "sdpa"
// Whether CausalAttention on `device` runs SDPA under the current selection.
bool UsesSdpa(c10::DeviceType device);

// The causal softmax of CausalAttention's CPU path (float32/float64) is a hand-written kernel
// (model/attention_cpu_kernel.inc), built for the baseline instruction set and for AVX2 with the
// same bits; it runs the AVX2 build on CPUs that have AVX2 unless this forces the baseline one
// (for the tests that compare the two, like ForceBaselineFusedKernels).
void ForceBaselineSoftmaxKernel(bool on);

// One row block's causal softmax as CausalAttention runs it (public for the tests). logits:
// [N,n,r1], the block of query rows [r0, r0 + n) against keys [0, r1 = r0 + n); row i sees keys
// [0, r0 + i]. Forward: the weights over those keys, exact zeros beyond. Backward: dp (same
// shape) becomes the logits' gradient p·(dp − Σ_j dp_j p_j), zeros beyond. On contiguous CPU
// float32/float64 tensors both work in place in the kernel; otherwise through ATen's softmax ops,
// and the argument is replaced by their result.
void CausalSoftmaxForward(at::Tensor& logits, int64_t r0);
void CausalSoftmaxBackward(at::Tensor& dp, const at::Tensor& p, int64_t r0);

// q, k, v: [B,H,T,d] (any strides). Causal softmax attention with logit scale `scale`: returns
// [B,H,T,d], through the kernel selected above. rdattn's kernel reads every operand in place
// (V typically a transposed view of the projection [B,T,H·d], q and k heads of a wider tensor)
// and returns a view of a [B,T,H,d] tensor, so that y.transpose(1, 2).reshape({B, T, H·d})
// copies nothing; its backward takes that layout's gradient as it comes and gives V's gradient
// in V's strides.
at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale);
// The same with q and k as the heads [0, H) and [H, 2H) of one qk [B,2H,T,d] (H = v's heads):
// RoPE's output for the one Q-and-K projection (GptImpl::Attention). On rdattn's kernel qk's
// gradient is one tensor written in place by both halves (no zero-filled slice gradients).
at::Tensor CausalAttention(const at::Tensor& qk, const at::Tensor& v, double scale);
at::Tensor CausalAttentionReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    double scale);

}  // namespace rdattn::model
