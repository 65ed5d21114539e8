// The attention sublayer's non-GEMM parts, made cheap for the CPU training step (issue 11):
// RoPE fused with the head split, and causal softmax attention that skips the masked half.
//
// `RopeHeads` is a custom autograd function with a hand-written loop (float and double on the
// CPU): it reads the projection [B,T,H·d] and writes the rotated heads [B,H,T,d] directly, so
// neither the head transpose's copy nor RotateHalf's cat/neg/mul/add temporaries are made, in
// the forward or the backward (whose rotation is the inverse one). Other devices and dtypes take
// the plain composition, `RopeHeadsReference`.
//
// `CausalAttention` is a custom autograd function built from ATen ops only (any device): the
// query rows go in blocks, and a block's logits, weights and products cover only the keys up to
// its last row (the masked keys would get weight exactly 0), so about 3/8 of the attention GEMMs
// (two forward, four backward; 64-row blocks at T = 256) and of the softmax are never computed,
// and no [T,T] mask is built. It saves the weights per block, as the plain composition saves
// the whole [T,T] matrix. `CausalAttentionReference` is the plain composition it is tested
// against (matmul, scale, masked_fill, softmax, matmul).
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

// q, k, v: [B,H,T,d] (any strides). Causal softmax attention with logit scale `scale`: returns
// [B,H,T,d], through the kernel selected above.
at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale);
at::Tensor CausalAttentionReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    double scale);

}  // namespace rdattn::model
