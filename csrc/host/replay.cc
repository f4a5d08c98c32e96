// rapid_llm._host: replay of recorded launch programs (see rapid_llm/kernels/ops/host_replay.py).
//
// A Replayer stands in front of one Python callable (an op's kernel entry). A call computes the
// structural key of its positional arguments: per tensor its device, dtype, sizes, strides and data
// pointer modulo 16; per int, float, bool, None or str its value; the byte distance between any two
// tensors whose spans overlap; the current device. A key seen before maps to a program that the Python
// side recorded from the callable's own run on arguments with that key: the tensors it allocated
// (sizes, strides, dtype) and the compiled Triton kernels it launched (CUfunction, grid, block, shared
// memory and every kernel parameter: a constant, a pointer at a fixed byte offset from an argument's or
// an allocation's data pointer, or a TMA descriptor (CUtensorMap) over such a pointer, re-encoded with
// the recorded geometry when its address changes). Replaying the program allocates the same tensors and
// makes the same launches on the current stream, without running the callable's Python.
//
// A key not seen before goes to `record(replayer, args)` (Python: runs the callable while recording and
// registers the program with add(), or marks the key with skip()); a key marked skip, arguments that
// have no key (a tensor subclass, a CPU tensor, keywords, ...), a full table or replay suspended
// (suspend(1)) go to the callable itself. Kernel parameter layouts are checked against the loaded
// function with cuFuncGetParamInfo when a program is added: a program that does not match is refused.
#include <Python.h>
#include <cuda.h>
#include <dlfcn.h>

#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kMaxArgs = 24;
constexpr size_t kDefaultCapacity = 1024;

// Replay is off while the counter is positive (launch overrides, value checks: host_replay.py).
int g_suspended = 0;

typedef CUresult (*LaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
typedef CUresult (*FuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*);
typedef CUresult (*GetErrorName)(CUresult, const char**);
typedef CUresult (*TensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                         const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                         CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                         CUtensorMapFloatOOBfill);

struct Driver {
  LaunchKernelEx launch = nullptr;
  FuncGetParamInfo param_info = nullptr;
  GetErrorName error_name = nullptr;
  TensorMapEncodeTiled encode_tiled = nullptr;
  std::string problem;
};

const Driver& driver() {
  static Driver loaded = [] {
    Driver d;
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      d.problem = "libcuda.so.1 does not load";
      return d;
    }
    d.launch = reinterpret_cast<LaunchKernelEx>(dlsym(handle, "cuLaunchKernelEx"));
    d.param_info = reinterpret_cast<FuncGetParamInfo>(dlsym(handle, "cuFuncGetParamInfo"));
    d.error_name = reinterpret_cast<GetErrorName>(dlsym(handle, "cuGetErrorName"));
    d.encode_tiled = reinterpret_cast<TensorMapEncodeTiled>(dlsym(handle, "cuTensorMapEncodeTiled"));
    if (d.launch == nullptr || d.param_info == nullptr) {
      d.problem = "the CUDA driver lacks cuLaunchKernelEx or cuFuncGetParamInfo (driver API 12.4+)";
    }
    return d;
  }();
  return loaded;
}

std::string error_text(CUresult status) {
  const char* name = nullptr;
  if (driver().error_name != nullptr) driver().error_name(status, &name);
  return name != nullptr ? name : std::to_string(static_cast<int>(status));
}

// ---------------------------------------------------------------------------------------------------
// Programs

enum ParamKind { kConstant = 0, kArgPointer = 1, kAllocPointer = 2, kArgTensorMap = 3, kAllocTensorMap = 4 };
enum ResultKind { kResultArg = 0, kResultAlloc = 1, kResultView = 2, kResultNone = 3, kResultTuple = 4 };

struct Param {
  int kind;
  int index;       // argument or allocation index (pointer and tensor-map kinds)
  int64_t offset;  // bytes from that tensor's data pointer (pointer and tensor-map kinds)
  int map;         // index into Kernel::maps (tensor-map kinds), else -1
};

// cuTensorMapEncodeTiled's arguments but the global address (dims, strides and box innermost first).
struct TensorMapSpec {
  CUtensorMapDataType dtype;
  cuuint32_t rank;
  cuuint64_t dims[5];
  cuuint64_t strides[4];  // bytes, dims 1..rank-1
  cuuint32_t box[5];
  CUtensorMapSwizzle swizzle;
  CUtensorMapFloatOOBfill fill;
  uint64_t encoded_address;  // the address maps[i] was last encoded for (~0: never)
};

struct Kernel {
  CUfunction function;
  unsigned grid[3];
  unsigned block;
  unsigned shared;
  bool pdl;
  bool cooperative;
  std::vector<Param> params;
  std::vector<uint64_t> values;  // one 8-byte slot per parameter, then the two scratch pointers (0)
  std::vector<CUtensorMap> maps;  // the tensor-map parameters' values (128 bytes, 64-byte aligned)
  std::vector<TensorMapSpec> map_specs;
  std::vector<void*> pointers;    // &values[i], or &maps[param.map]
};

struct Alloc {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  at::ScalarType dtype;
};

struct Result {
  int kind;
  int index;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  std::vector<Result> children;
};

struct Program {
  bool skip = false;
  std::string reason;  // why a skipped key is not replayed
  int device = 0;
  std::vector<Alloc> allocs;
  std::vector<Kernel> kernels;
  Result result;
};

// ---------------------------------------------------------------------------------------------------
// Keys

struct Arguments {
  PyObject* const* items;
  Py_ssize_t count;
  uint64_t pointers[kMaxArgs];  // data pointer of each tensor argument (0 otherwise)
};

inline void put(std::string& key, int64_t value) { key.append(reinterpret_cast<const char*>(&value), 8); }

// The structural key of args (module comment), or false when they have none.
bool build_key(Arguments& args, std::string& key) {
  if (args.count > kMaxArgs) return false;
  uint64_t low[kMaxArgs];
  uint64_t high[kMaxArgs];
  int spans[kMaxArgs];
  int span_count = 0;
  for (Py_ssize_t i = 0; i < args.count; ++i) {
    PyObject* item = args.items[i];
    args.pointers[i] = 0;
    if (THPVariable_CheckExact(item)) {
      const at::Tensor& tensor = THPVariable_Unpack(item);
      if (!tensor.defined() || !tensor.is_cuda() || tensor.layout() != c10::kStrided || tensor.requires_grad() ||
          tensor.is_conj() || tensor.is_neg()) {
        return false;
      }
      const uint64_t pointer = reinterpret_cast<uint64_t>(tensor.const_data_ptr());
      args.pointers[i] = pointer;
      const int64_t dim = tensor.dim();
      put(key, 1);
      put(key, tensor.get_device());
      put(key, static_cast<int64_t>(tensor.scalar_type()));
      put(key, dim);
      int64_t extent = 1;
      bool empty = false;
      for (int64_t d = 0; d < dim; ++d) {
        const int64_t size = tensor.size(d), stride = tensor.stride(d);
        put(key, size);
        put(key, stride);
        if (size == 0) empty = true;
        if (stride < 0) return false;
        extent += (size - 1) * stride;
      }
      put(key, static_cast<int64_t>(pointer & 15));
      if (!empty) {
        low[span_count] = pointer;
        high[span_count] = pointer + static_cast<uint64_t>(extent) * tensor.element_size();
        spans[span_count++] = static_cast<int>(i);
      }
    } else if (PyBool_Check(item)) {
      put(key, 2);
      put(key, item == Py_True);
    } else if (PyLong_CheckExact(item)) {
      int overflow = 0;
      const long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
      if (overflow != 0) return false;
      put(key, 3);
      put(key, value);
    } else if (PyFloat_CheckExact(item)) {
      const double value = PyFloat_AS_DOUBLE(item);
      int64_t bits;
      std::memcpy(&bits, &value, 8);
      put(key, 4);
      put(key, bits);
    } else if (item == Py_None) {
      put(key, 5);
    } else if (PyUnicode_CheckExact(item)) {
      Py_ssize_t length = 0;
      const char* text = PyUnicode_AsUTF8AndSize(item, &length);
      if (text == nullptr) {
        PyErr_Clear();
        return false;
      }
      put(key, 6);
      put(key, length);
      key.append(text, length);
    } else {
      return false;
    }
  }
  // Overlapping spans: their distance decides what the op's aliasing checks see, so it is part of the key.
  for (int a = 0; a < span_count; ++a) {
    for (int b = a + 1; b < span_count; ++b) {
      if (low[a] < high[b] && low[b] < high[a]) {
        put(key, 7);
        put(key, spans[a]);
        put(key, spans[b]);
        put(key, static_cast<int64_t>(low[b] - low[a]));
      }
    }
  }
  put(key, c10::cuda::current_device());
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Replay

PyObject* build_result(const Result& result, const Arguments& args, std::vector<at::Tensor>& allocs) {
  switch (result.kind) {
    case kResultArg: {
      PyObject* item = args.items[result.index];
      Py_INCREF(item);
      return item;
    }
    case kResultAlloc:
      return THPVariable_Wrap(allocs[result.index]);
    case kResultView:
      return THPVariable_Wrap(allocs[result.index].as_strided(result.sizes, result.strides, result.storage_offset));
    case kResultNone:
      Py_RETURN_NONE;
    default: {
      PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(result.children.size()));
      if (tuple == nullptr) return nullptr;
      for (size_t i = 0; i < result.children.size(); ++i) {
        PyObject* child = build_result(result.children[i], args, allocs);
        if (child == nullptr) {
          Py_DECREF(tuple);
          return nullptr;
        }
        PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), child);
      }
      return tuple;
    }
  }
}

PyObject* replay(Program& program, const Arguments& args) {
  std::vector<at::Tensor> allocs;
  allocs.reserve(program.allocs.size());
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(program.device));
  try {
    for (const Alloc& alloc : program.allocs) {
      allocs.emplace_back(at::detail::empty_strided_cuda(alloc.sizes, alloc.strides, alloc.dtype, device));
    }
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
  const CUstream stream =
      reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(program.device)).stream());
  for (Kernel& kernel : program.kernels) {
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      const Param& param = kernel.params[i];
      if (param.kind == kConstant) continue;
      const bool from_arg = param.kind == kArgPointer || param.kind == kArgTensorMap;
      const uint64_t address =
          (from_arg ? args.pointers[param.index]
                    : reinterpret_cast<uint64_t>(allocs[param.index].const_data_ptr())) +
          param.offset;
      if (param.map < 0) {
        kernel.values[i] = address;
        continue;
      }
      TensorMapSpec& spec = kernel.map_specs[param.map];
      if (spec.encoded_address == address) continue;  // a long-lived tensor (a KV cache): encoded once
      static const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
      const CUresult status = driver().encode_tiled(
          &kernel.maps[param.map], spec.dtype, spec.rank, reinterpret_cast<void*>(address), spec.dims, spec.strides,
          spec.box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, spec.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, spec.fill);
      if (status != CUDA_SUCCESS) {
        spec.encoded_address = ~0ull;
        PyErr_Format(PyExc_RuntimeError, "rapid_llm host replay: cuTensorMapEncodeTiled failed: %s",
                     error_text(status).c_str());
        return nullptr;
      }
      spec.encoded_address = address;
    }
    if (static_cast<uint64_t>(kernel.grid[0]) * kernel.grid[1] * kernel.grid[2] == 0) continue;
    CUlaunchAttribute attributes[2];
    unsigned count = 0;
    if (kernel.pdl) {
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attributes[count++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (kernel.cooperative) {
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attributes[count++].value.cooperative = 1;
    }
    CUlaunchConfig config;
    std::memset(&config, 0, sizeof(config));
    config.gridDimX = kernel.grid[0];
    config.gridDimY = kernel.grid[1];
    config.gridDimZ = kernel.grid[2];
    config.blockDimX = kernel.block;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = kernel.shared;
    config.hStream = stream;
    config.attrs = attributes;
    config.numAttrs = count;
    const CUresult status = driver().launch(&config, kernel.function, kernel.pointers.data(), nullptr);
    if (status != CUDA_SUCCESS) {
      PyErr_Format(PyExc_RuntimeError, "rapid_llm host replay: cuLaunchKernelEx failed: %s", error_text(status).c_str());
      return nullptr;
    }
  }
  return build_result(program.result, args, allocs);
}

// ---------------------------------------------------------------------------------------------------
// Parsing a program from Python (host_replay.py builds it)

bool int_list(PyObject* sequence, std::vector<int64_t>& out) {
  PyObject* fast = PySequence_Fast(sequence, "expected a sequence of ints");
  if (fast == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long value = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (value == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return false;
    }
    out.push_back(value);
  }
  Py_DECREF(fast);
  return true;
}

bool parse_result(PyObject* spec, Result& result) {
  // (kind, index) | (kResultView, index, sizes, strides, storage_offset) | (kResultNone,) | (kResultTuple, [specs])
  if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1) {
    PyErr_SetString(PyExc_ValueError, "a result spec is a non-empty tuple");
    return false;
  }
  result.kind = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(spec, 0)));
  const Py_ssize_t size = PyTuple_GET_SIZE(spec);
  if (result.kind == kResultArg || result.kind == kResultAlloc) {
    if (size != 2) goto malformed;
    result.index = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(spec, 1)));
  } else if (result.kind == kResultView) {
    if (size != 5) goto malformed;
    result.index = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(spec, 1)));
    if (!int_list(PyTuple_GET_ITEM(spec, 2), result.sizes) || !int_list(PyTuple_GET_ITEM(spec, 3), result.strides)) {
      return false;
    }
    result.storage_offset = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 4));
  } else if (result.kind == kResultTuple) {
    if (size != 2) goto malformed;
    PyObject* fast = PySequence_Fast(PyTuple_GET_ITEM(spec, 1), "a tuple result lists its items");
    if (fast == nullptr) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    result.children.resize(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!parse_result(PySequence_Fast_GET_ITEM(fast, i), result.children[i])) {
        Py_DECREF(fast);
        return false;
      }
    }
    Py_DECREF(fast);
  } else if (result.kind != kResultNone) {
    goto malformed;
  }
  return !PyErr_Occurred();
malformed:
  PyErr_SetString(PyExc_ValueError, "malformed result spec");
  return false;
}

bool check_result(const Result& result, Py_ssize_t arg_count, size_t alloc_count) {
  if (result.kind == kResultArg) return result.index >= 0 && result.index < arg_count;
  if (result.kind == kResultAlloc || result.kind == kResultView) {
    return result.index >= 0 && static_cast<size_t>(result.index) < alloc_count;
  }
  for (const Result& child : result.children) {
    if (!check_result(child, arg_count, alloc_count)) return false;
  }
  return true;
}

// A tensor map's geometry: (dtype, swizzle, fill, dims, byte strides, box), innermost first.
bool parse_tensor_map(PyObject* spec, TensorMapSpec& map) {
  int dtype, swizzle, fill;
  PyObject *dims_obj, *strides_obj, *box_obj;
  if (!PyArg_ParseTuple(spec, "iiiOOO", &dtype, &swizzle, &fill, &dims_obj, &strides_obj, &box_obj)) return false;
  std::vector<int64_t> dims, strides, box;
  if (!int_list(dims_obj, dims) || !int_list(strides_obj, strides) || !int_list(box_obj, box)) return false;
  if (dims.empty() || dims.size() > 5 || strides.size() + 1 != dims.size() || box.size() != dims.size()) {
    PyErr_SetString(PyExc_ValueError, "a tensor map has rank 1-5, rank-1 strides and a box per dim");
    return false;
  }
  map.dtype = static_cast<CUtensorMapDataType>(dtype);
  map.rank = static_cast<cuuint32_t>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    map.dims[i] = static_cast<cuuint64_t>(dims[i]);
    map.box[i] = static_cast<cuuint32_t>(box[i]);
  }
  for (size_t i = 0; i < strides.size(); ++i) map.strides[i] = static_cast<cuuint64_t>(strides[i]);
  map.swizzle = static_cast<CUtensorMapSwizzle>(swizzle);
  map.fill = static_cast<CUtensorMapFloatOOBfill>(fill);
  map.encoded_address = ~0ull;
  return true;
}

// A kernel: (function, (gx, gy, gz), block, shared, pdl, cooperative, [param, ...]), a param being
// (kind, index, value, size) or, for a tensor map, (kind, index, offset, 128, geometry).
// Constants carry their bytes in `value` (little-endian, `size` bytes); pointers carry their offset.
bool parse_kernel(PyObject* spec, Kernel& kernel, Py_ssize_t arg_count, size_t alloc_count) {
  PyObject *function, *grid, *params;
  unsigned long long block, shared;
  int pdl, cooperative;
  if (!PyArg_ParseTuple(spec, "OOKKppO", &function, &grid, &block, &shared, &pdl, &cooperative, &params)) return false;
  kernel.function = reinterpret_cast<CUfunction>(PyLong_AsUnsignedLongLong(function));
  std::vector<int64_t> dims;
  if (PyErr_Occurred() || !int_list(grid, dims)) return false;
  if (dims.size() != 3 || block == 0 || block > 1024) {
    PyErr_SetString(PyExc_ValueError, "a kernel needs a 3D grid and 1-1024 threads");
    return false;
  }
  for (int i = 0; i < 3; ++i) {
    if (dims[i] < 0 || dims[i] > 0x7fffffff) {
      PyErr_SetString(PyExc_ValueError, "grid dimension out of range");
      return false;
    }
    kernel.grid[i] = static_cast<unsigned>(dims[i]);
  }
  kernel.block = static_cast<unsigned>(block);
  kernel.shared = static_cast<unsigned>(shared);
  kernel.pdl = pdl != 0;
  kernel.cooperative = cooperative != 0;
  PyObject* fast = PySequence_Fast(params, "a kernel lists its parameters");
  if (fast == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  std::vector<size_t> sizes;
  for (Py_ssize_t i = 0; i < n; ++i) {
    int kind, index;
    unsigned long long value, size;
    PyObject* geometry = nullptr;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "iiKK|O", &kind, &index, &value, &size, &geometry)) {
      Py_DECREF(fast);
      return false;
    }
    const bool tensor_map = kind == kArgTensorMap || kind == kAllocTensorMap;
    const bool pointer = kind == kArgPointer || kind == kAllocPointer;
    const bool from_arg = kind == kArgPointer || kind == kArgTensorMap;
    const bool in_range = kind == kConstant ? true
                          : from_arg        ? (index >= 0 && index < arg_count)
                          : (pointer || tensor_map) && index >= 0 && static_cast<size_t>(index) < alloc_count;
    const bool sized = tensor_map ? size == sizeof(CUtensorMap) : pointer ? size == 8 : (size > 0 && size <= 8);
    if (!in_range || !sized || (tensor_map != (geometry != nullptr))) {
      Py_DECREF(fast);
      PyErr_Format(PyExc_ValueError, "parameter %zd: kind %d, index %d, size %llu is not valid", i, kind, index, size);
      return false;
    }
    int map = -1;
    if (tensor_map) {
      if (driver().encode_tiled == nullptr) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_RuntimeError, "the CUDA driver lacks cuTensorMapEncodeTiled");
        return false;
      }
      TensorMapSpec spec;
      if (!parse_tensor_map(geometry, spec)) {
        Py_DECREF(fast);
        return false;
      }
      map = static_cast<int>(kernel.map_specs.size());
      kernel.map_specs.push_back(spec);
    }
    kernel.params.push_back({kind, index, (pointer || tensor_map) ? static_cast<int64_t>(value) : 0, map});
    kernel.values.push_back((pointer || tensor_map) ? 0 : value);
    sizes.push_back(static_cast<size_t>(size));
  }
  Py_DECREF(fast);
  kernel.maps.resize(kernel.map_specs.size());
  // Triton appends two scratch pointers (global and profile), null when the kernel needs none.
  kernel.values.push_back(0);
  kernel.values.push_back(0);
  sizes.push_back(8);
  sizes.push_back(8);
  for (size_t i = 0; i < sizes.size(); ++i) {
    size_t offset = 0, size = 0;
    const CUresult status = driver().param_info(kernel.function, i, &offset, &size);
    if (status != CUDA_SUCCESS || size != sizes[i]) {
      PyErr_Format(PyExc_ValueError,
                   "the kernel's parameter %zu is %s, the program's %zu bytes (cuFuncGetParamInfo)", i,
                   status == CUDA_SUCCESS ? (std::to_string(size) + " bytes").c_str() : error_text(status).c_str(),
                   sizes[i]);
      return false;
    }
  }
  size_t offset = 0, size = 0;
  if (driver().param_info(kernel.function, sizes.size(), &offset, &size) == CUDA_SUCCESS) {
    PyErr_Format(PyExc_ValueError, "the kernel takes more than the program's %zu parameters", sizes.size());
    return false;
  }
  for (size_t i = 0; i < kernel.values.size(); ++i) {
    const bool mapped = i < kernel.params.size() && kernel.params[i].map >= 0;
    kernel.pointers.push_back(mapped ? static_cast<void*>(&kernel.maps[kernel.params[i].map])
                                     : static_cast<void*>(&kernel.values[i]));
  }
  return true;
}

// A program: (device, [(sizes, strides, dtype), ...], [kernel, ...], result).
bool parse_program(PyObject* spec, Program& program, Py_ssize_t arg_count) {
  PyObject *allocs, *kernels, *result;
  if (!PyArg_ParseTuple(spec, "iOOO", &program.device, &allocs, &kernels, &result)) return false;
  PyObject* fast = PySequence_Fast(allocs, "a program lists its allocations");
  if (fast == nullptr) return false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); ++i) {
    PyObject *sizes, *strides, *dtype;
    Alloc alloc;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "OOO", &sizes, &strides, &dtype) ||
        !int_list(sizes, alloc.sizes) || !int_list(strides, alloc.strides)) {
      Py_DECREF(fast);
      return false;
    }
    if (!THPDtype_Check(dtype) || alloc.sizes.size() != alloc.strides.size()) {
      Py_DECREF(fast);
      PyErr_SetString(PyExc_ValueError, "an allocation is (sizes, strides, torch.dtype) of one rank");
      return false;
    }
    alloc.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
    program.allocs.push_back(std::move(alloc));
  }
  Py_DECREF(fast);
  fast = PySequence_Fast(kernels, "a program lists its kernels");
  if (fast == nullptr) return false;
  program.kernels.resize(PySequence_Fast_GET_SIZE(fast));
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    if (!parse_kernel(PySequence_Fast_GET_ITEM(fast, i), program.kernels[i], arg_count, program.allocs.size())) {
      Py_DECREF(fast);
      return false;
    }
  }
  Py_DECREF(fast);
  if (!parse_result(result, program.result)) return false;
  if (!check_result(program.result, arg_count, program.allocs.size())) {
    PyErr_SetString(PyExc_ValueError, "a result names an argument or allocation the program does not have");
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------
// The Replayer type

struct Replayer {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* impl;    // the callable replayed
  PyObject* record;  // record(replayer, args_tuple) -> result, for a key not seen before
  std::unordered_map<std::string, Program>* programs;
  size_t capacity;
  unsigned long long hits;
};

PyObject* call_impl(Replayer* self, PyObject* const* items, size_t nargsf, PyObject* kwnames) {
  return PyObject_Vectorcall(self->impl, items, nargsf, kwnames);
}

PyObject* replayer_call(PyObject* callable, PyObject* const* items, size_t nargsf, PyObject* kwnames) {
  Replayer* self = reinterpret_cast<Replayer*>(callable);
  const Py_ssize_t count = PyVectorcall_NARGS(nargsf);
  if (g_suspended > 0 || kwnames != nullptr) return call_impl(self, items, nargsf, kwnames);
  Arguments args{items, count, {}};
  std::string key;
  key.reserve(256);
  if (!build_key(args, key)) return call_impl(self, items, nargsf, kwnames);
  auto found = self->programs->find(key);
  if (found != self->programs->end()) {
    if (found->second.skip) return call_impl(self, items, nargsf, kwnames);
    ++self->hits;
    return replay(found->second, args);
  }
  if (self->programs->size() >= self->capacity) return call_impl(self, items, nargsf, kwnames);
  PyObject* tuple = PyTuple_New(count);
  if (tuple == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < count; ++i) {
    Py_INCREF(items[i]);
    PyTuple_SET_ITEM(tuple, i, items[i]);
  }
  PyObject* result = PyObject_CallFunctionObjArgs(self->record, callable, tuple, nullptr);
  Py_DECREF(tuple);
  return result;
}

// call(args_tuple): the same as replayer(*args_tuple), for callers that hold a tuple.
PyObject* replayer_call_tuple(PyObject* self, PyObject* tuple) {
  if (!PyTuple_Check(tuple)) {
    PyErr_SetString(PyExc_TypeError, "Replayer.call takes a tuple of arguments");
    return nullptr;
  }
  return replayer_call(self, &PyTuple_GET_ITEM(tuple, 0), PyTuple_GET_SIZE(tuple), nullptr);
}

bool key_of(PyObject* tuple, Arguments& args, std::string& key) {
  if (!PyTuple_Check(tuple)) {
    PyErr_SetString(PyExc_TypeError, "expected the tuple of arguments");
    return false;
  }
  args.items = &PyTuple_GET_ITEM(tuple, 0);
  args.count = PyTuple_GET_SIZE(tuple);
  if (!build_key(args, key)) {
    PyErr_SetString(PyExc_ValueError, "these arguments have no replay key");
    return false;
  }
  return true;
}

// add(args_tuple, program): replay `program` for every later call whose key is args_tuple's.
PyObject* replayer_add(PyObject* object, PyObject* call_args) {
  Replayer* self = reinterpret_cast<Replayer*>(object);
  PyObject *tuple, *spec;
  if (!PyArg_ParseTuple(call_args, "OO", &tuple, &spec)) return nullptr;
  if (!driver().problem.empty()) {
    PyErr_SetString(PyExc_RuntimeError, driver().problem.c_str());
    return nullptr;
  }
  Arguments args{};
  std::string key;
  if (!key_of(tuple, args, key)) return nullptr;
  Program program;
  if (!parse_program(spec, program, args.count)) return nullptr;
  (*self->programs)[key] = std::move(program);
  Py_RETURN_NONE;
}

// skip(args_tuple, reason): calls with args_tuple's key run the callable itself.
PyObject* replayer_skip(PyObject* object, PyObject* call_args) {
  Replayer* self = reinterpret_cast<Replayer*>(object);
  PyObject* tuple;
  const char* reason;
  if (!PyArg_ParseTuple(call_args, "Os", &tuple, &reason)) return nullptr;
  Arguments args{};
  std::string key;
  if (!key_of(tuple, args, key)) return nullptr;
  Program program;
  program.skip = true;
  program.reason = reason;
  (*self->programs)[key] = std::move(program);
  Py_RETURN_NONE;
}

// lookup(args_tuple) -> None (not seen), "replay", or the reason its key is skipped.
PyObject* replayer_lookup(PyObject* object, PyObject* tuple) {
  Replayer* self = reinterpret_cast<Replayer*>(object);
  Arguments args{};
  std::string key;
  if (!key_of(tuple, args, key)) return nullptr;
  auto found = self->programs->find(key);
  if (found == self->programs->end()) Py_RETURN_NONE;
  return PyUnicode_FromString(found->second.skip ? found->second.reason.c_str() : "replay");
}

PyObject* replayer_clear(PyObject* object, PyObject*) {
  reinterpret_cast<Replayer*>(object)->programs->clear();
  Py_RETURN_NONE;
}

PyObject* replayer_stats(PyObject* object, PyObject*) {
  Replayer* self = reinterpret_cast<Replayer*>(object);
  size_t skipped = 0;
  for (const auto& entry : *self->programs) skipped += entry.second.skip;
  return Py_BuildValue("{s:n,s:n,s:K}", "programs", static_cast<Py_ssize_t>(self->programs->size() - skipped),
                       "skipped", static_cast<Py_ssize_t>(skipped), "hits", self->hits);
}

PyObject* replayer_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *impl, *record;
  Py_ssize_t capacity = kDefaultCapacity;
  static const char* names[] = {"impl", "record", "capacity", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|n", const_cast<char**>(names), &impl, &record, &capacity)) {
    return nullptr;
  }
  if (!PyCallable_Check(impl) || !PyCallable_Check(record) || capacity < 0) {
    PyErr_SetString(PyExc_TypeError, "Replayer(impl, record, capacity=1024): two callables and a capacity >= 0");
    return nullptr;
  }
  Replayer* self = reinterpret_cast<Replayer*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->vectorcall = replayer_call;
  Py_INCREF(impl);
  Py_INCREF(record);
  self->impl = impl;
  self->record = record;
  self->programs = new std::unordered_map<std::string, Program>();
  self->capacity = static_cast<size_t>(capacity);
  self->hits = 0;
  return reinterpret_cast<PyObject*>(self);
}

void replayer_dealloc(PyObject* object) {
  Replayer* self = reinterpret_cast<Replayer*>(object);
  Py_XDECREF(self->impl);
  Py_XDECREF(self->record);
  delete self->programs;
  Py_TYPE(object)->tp_free(object);
}

PyObject* replayer_impl(PyObject* object, void*) {
  PyObject* impl = reinterpret_cast<Replayer*>(object)->impl;
  Py_INCREF(impl);
  return impl;
}

PyMethodDef replayer_methods[] = {
    {"call", replayer_call_tuple, METH_O, "call(args): the same as replayer(*args)"},
    {"add", replayer_add, METH_VARARGS, "add(args, program): replay program for calls with args' key"},
    {"skip", replayer_skip, METH_VARARGS, "skip(args, reason): calls with args' key run impl"},
    {"lookup", replayer_lookup, METH_O, "lookup(args): None, 'replay' or the reason the key is skipped"},
    {"clear", replayer_clear, METH_NOARGS, "forget every key"},
    {"stats", replayer_stats, METH_NOARGS, "{'programs', 'skipped', 'hits'}"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef replayer_getset[] = {{"impl", replayer_impl, nullptr, "the callable replayed", nullptr},
                                 {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject ReplayerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* module_suspend(PyObject*, PyObject* delta) {
  const long value = PyLong_AsLong(delta);
  if (value == -1 && PyErr_Occurred()) return nullptr;
  g_suspended += static_cast<int>(value);
  if (g_suspended < 0) g_suspended = 0;
  return PyLong_FromLong(g_suspended);
}

PyObject* module_driver_problem(PyObject*, PyObject*) {
  if (driver().problem.empty()) Py_RETURN_NONE;
  return PyUnicode_FromString(driver().problem.c_str());
}

PyMethodDef module_methods[] = {
    {"suspend", module_suspend, METH_O, "suspend(delta): add delta to the suspension count; returns it"},
    {"driver_problem", module_driver_problem, METH_NOARGS, "why replay cannot launch here, or None"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_host", "rapid_llm host replay (csrc/host/replay.cc)", -1,
                          module_methods};

}  // namespace

extern "C" PyObject* PyInit__host(void) {
  ReplayerType.tp_name = "rapid_llm._host.Replayer";
  ReplayerType.tp_basicsize = sizeof(Replayer);
  ReplayerType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  ReplayerType.tp_vectorcall_offset = offsetof(Replayer, vectorcall);
  ReplayerType.tp_call = PyVectorcall_Call;
  ReplayerType.tp_new = replayer_new;
  ReplayerType.tp_dealloc = replayer_dealloc;
  ReplayerType.tp_methods = replayer_methods;
  ReplayerType.tp_getset = replayer_getset;
  ReplayerType.tp_doc = "Replayer(impl, record, capacity=1024): replays impl's recorded launches (module docstring)";
  if (PyType_Ready(&ReplayerType) < 0) return nullptr;
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  Py_INCREF(&ReplayerType);
  if (PyModule_AddObject(module, "Replayer", reinterpret_cast<PyObject*>(&ReplayerType)) < 0) {
    Py_DECREF(&ReplayerType);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
