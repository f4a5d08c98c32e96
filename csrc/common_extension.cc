// Registration of every op of the rapid_llm CUDA extension.
//
// One library fragment: the schema is defined here (device independent) and
// the CUDA kernel is attached to it. The ops defined here are exactly
// rapid_llm.kernels.aot.extension_ops() (the op part of every aot/ and jit/
// row's op id). Every schema lists its `Tensor!` outputs first and returns
// (); its launcher, declared in rapid_llm_ext.h, takes the same arguments in
// the same order. conformance/test_extension.py parses this file to check
// all of that.
//
// RAPID_LLM_OP_NAMESPACE is rapid_llm for the AOT build (rapid_llm._C) and
// rapid_llm_jit for the JIT build; see rapid_llm_ext.h for why they differ.
#include <Python.h>
// c10::kCUDA / c10::kCPU rather than torch::kCUDA: the torch:: aliases come
// only with <torch/all.h>, which would add seconds of compile time for nothing.
#include <torch/library.h>

#include "rapid_llm_ext.h"

TORCH_LIBRARY_FRAGMENT(RAPID_LLM_OP_NAMESPACE, m) {
  // `Tensor! out`: the op writes out in place and returns nothing, so the
  // caller owns the allocation (and can reuse it inside a CUDA graph).
  m.def("scale(Tensor! out, Tensor input, float factor) -> ()");
  m.impl("scale", c10::kCUDA, &rapid_llm::scale);
  // CPU tensors reach the same launcher only to fail its first TORCH_CHECK
  // ("input must be a CUDA tensor"): a RuntimeError naming the problem,
  // instead of the dispatcher's NotImplementedError about a missing backend.
  m.impl("scale", c10::kCPU, &rapid_llm::scale);

  m.def("update_kv_buffer(Tensor! buffer, Tensor kv, Tensor loc) -> ()");
  m.impl("update_kv_buffer", c10::kCUDA, &rapid_llm::update_kv_buffer);
  m.impl("update_kv_buffer", c10::kCPU, &rapid_llm::update_kv_buffer);

  // attention.decode over an fp8-e4m3 KV buffer (csrc/attention/decode_fp8.cu); partial and partial_lse are
  // the splits' scratch (one schema string: conformance/test_extension.py parses it).
  m.def("decode(Tensor! out, Tensor! partial, Tensor! partial_lse, Tensor q, Tensor kv_buffer, Tensor page_table, Tensor seq_lens, Tensor k_scale, Tensor v_scale, int page_size, float sm_scale, int num_splits) -> ()");
  m.impl("decode", c10::kCUDA, &rapid_llm::decode);
  m.impl("decode", c10::kCPU, &rapid_llm::decode);

  // gemm.w4a16_mm at decode token counts over GPTQ words (csrc/gemm/w4a16_mma.cu); bias empty: none.
  m.def("w4a16_mm(Tensor! out, Tensor x, Tensor qweight, Tensor scales, Tensor qzeros, Tensor bias, int group_size, bool v1_zeros) -> ()");
  m.impl("w4a16_mm", c10::kCUDA, &rapid_llm::w4a16_mm);
  m.impl("w4a16_mm", c10::kCPU, &rapid_llm::w4a16_mm);

  // gemm.w8a16_mm at decode token counts (csrc/gemm/w8a16_mma.cu); bias empty: none.
  m.def("w8a16_mm(Tensor! out, Tensor x, Tensor w_q, Tensor w_scale, Tensor bias) -> ()");
  m.impl("w8a16_mm", c10::kCUDA, &rapid_llm::w8a16_mm);
  m.impl("w8a16_mm", c10::kCPU, &rapid_llm::w8a16_mm);
}

// `import rapid_llm._C` needs a module init function. The module carries no
// Python attributes: loading the shared library runs the registration above,
// and the ops are reached through torch.ops.rapid_llm.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT, "_C", "rapid_llm CUDA extension (ops in torch.ops.rapid_llm)", -1,
      nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module_def);
}
