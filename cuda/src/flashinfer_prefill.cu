// The FlashInfer prefill kernels kvpolicy uses, compiled once for every program
// that links kvpolicy_flashinfer_kernels (see kvpolicy/cuda/flashinfer/instantiated.cuh).
#include <kvpolicy/cuda/flashinfer/prefill_kernels.cuh>
