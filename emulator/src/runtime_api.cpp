// The CUDA runtime API on the emulated device: the calls the project makes
// (memory, copies, streams, events, device queries, errors, kernel
// attributes), declared by NVIDIA's cuda_runtime_api.h and defined here
// instead of in libcudart. Every entry point takes the emulator's lock,
// returns a sticky device fault if there is one, and reports a misuse in one
// "gt-emu: error:" line before returning the code the runtime would.
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "block_scheduler.hpp"
#include "config.hpp"
#include "diagnostics.hpp"
#include "emulator.hpp"
#include "tensor_map.hpp"

using gt::emu::Emulator;
using gt::emu::fail;
using gt::emu::Lock;
using gt::emu::StreamScheduler;

namespace {

using gt::emu::address;

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

// Checks one side of a copy: device sides must lie wholly in one device
// allocation, host sides must not be device memory.
cudaError_t check_side(const char* api, const char* side, const void* p, size_t n, bool device) {
  Emulator& e = Emulator::get();
  if (device) {
    if (e.memory.find_device_range(p, n)) return cudaSuccess;
    const gt::emu::Allocation* a = e.memory.find(p);
    if (a && !a->pinned)
      return fail(cudaErrorInvalidValue,
                  std::string(api) + ": " + std::to_string(n) + " bytes at " + side + " " +
                      address(p) + " run past the end of its device allocation of " +
                      std::to_string(a->bytes) + " bytes (by " +
                      std::to_string(static_cast<const unsigned char*>(p) + n - (a->base + a->bytes)) +
                      ")");
    return fail(cudaErrorInvalidValue, std::string(api) + ": the " + side + " " + address(p) +
                                           " is not device memory (host memory, or freed)");
  }
  const gt::emu::Allocation* a = e.memory.find(p);
  if (a && !a->pinned)
    return fail(cudaErrorInvalidValue, std::string(api) + ": the " + side + " " + address(p) +
                                           " is device memory, but the copy kind says host");
  return cudaSuccess;
}

// Validates a copy and turns cudaMemcpyDefault into the direction the
// pointers have.
cudaError_t check_copy(const char* api, void* dst, const void* src, size_t n,
                       cudaMemcpyKind* kind) {
  Emulator& e = Emulator::get();
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue, std::string(api) + ": null pointer");
  if (*kind == cudaMemcpyDefault) {
    const gt::emu::Allocation* d = e.memory.find(dst);
    const gt::emu::Allocation* s = e.memory.find(src);
    const bool dd = d && !d->pinned, sd = s && !s->pinned;
    *kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
               : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  bool dst_dev = false, src_dev = false;
  switch (*kind) {
    case cudaMemcpyHostToHost: break;
    case cudaMemcpyHostToDevice: dst_dev = true; break;
    case cudaMemcpyDeviceToHost: src_dev = true; break;
    case cudaMemcpyDeviceToDevice: dst_dev = src_dev = true; break;
    default:
      return fail(cudaErrorInvalidMemcpyDirection, std::string(api) + ": " + kind_name(*kind));
  }
  if (cudaError_t r = check_side(api, "destination", dst, n, dst_dev)) return r;
  return check_side(api, "source", src, n, src_dev);
}

// Queues a copy. A pageable host source is read now (the runtime stages it
// before returning); pinned memory and device memory are read when the copy
// runs, in stream order.
void enqueue_copy(CUstream_st* s, void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  Emulator& e = Emulator::get();
  const bool staged = kind == cudaMemcpyHostToDevice && !e.memory.is_pinned(src);
  std::string what = std::string("memcpy ") + kind_name(kind) + " of " + std::to_string(n) + " bytes";
  if (staged) {
    auto copy = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
    e.streams.enqueue_task(s, std::move(what), [dst, copy] {
      std::memcpy(dst, copy->data(), copy->size());
    });
  } else {
    e.streams.enqueue_task(s, std::move(what), [dst, src, n] { std::memmove(dst, src, n); });
  }
}

#define GT_EMU_ENTRY()                 \
  Emulator& emu = Emulator::get();     \
  Lock gt_emu_lock(emu.mu);            \
  if (cudaError_t gt_emu_sticky = gt::emu::sticky_error()) return gt_emu_sticky

bool wait_for(const std::function<bool()>& done) {
  return Emulator::get().streams.run_until(done, StreamScheduler::Mode::block);
}

cudaError_t after_wait(bool ok) {
  if (ok) return cudaSuccess;
  const cudaError_t st = gt::emu::sticky_error();
  return fail(st != cudaSuccess ? st : cudaErrorLaunchFailure);
}

}  // namespace

extern "C" {

// ---- devices ------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  Emulator& emu = Emulator::get();
  Lock lock(emu.mu);
  if (!count) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null count");
  *count = emu.device_count();
  if (*count == 0) return fail(cudaErrorNoDevice);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  GT_EMU_ENTRY();
  if (device < 0 || device >= emu.device_count())
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): " +
                                            std::to_string(emu.device_count()) +
                                            " emulated device(s) are visible");
  gt::emu::set_current_device(device);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  GT_EMU_ENTRY();
  if (!device) return fail(cudaErrorInvalidValue, "cudaGetDevice: null device");
  *device = gt::emu::current_device();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  GT_EMU_ENTRY();
  if (!prop) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null prop");
  if (device < 0 || device >= emu.device_count()) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "gt-emu emulated device (H200 limits)");
  prop->totalGlobalMem = gt::emu::kDeviceMemoryBytes;
  prop->sharedMemPerBlock = gt::emu::kDefaultSharedPerBlock;
  prop->sharedMemPerBlockOptin = gt::emu::kMaxSharedPerBlockOptin;
  prop->sharedMemPerMultiprocessor = 233472;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = gt::emu::kMaxThreadsPerBlock;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = gt::emu::config().compute_capability / 10;
  prop->minor = gt::emu::config().compute_capability % 10;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 << 20;
  prop->memoryBusWidth = 6144;
  prop->totalConstMem = 65536;
  prop->unifiedAddressing = 1;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 3;
  prop->pciDeviceID = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  GT_EMU_ENTRY();
  if (!value || device < 0 || device >= emu.device_count()) return fail(cudaErrorInvalidValue);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = gt::emu::kMaxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = gt::emu::kMaxSharedPerBlockOptin; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = gt::emu::kDefaultSharedPerBlock; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    default:
      return fail(cudaErrorNotSupported, "cudaDeviceGetAttribute: attribute " +
                                             std::to_string(static_cast<int>(attr)) +
                                             " is not emulated");
  }
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

// The driver entry points the project asks for by name (the runtime hands
// out libcuda's; here the emulator's): cuTensorMapEncodeTiled only.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  (void)cudaVersion;
  (void)flags;
  if (!symbol || !funcPtr) return fail(cudaErrorInvalidValue, "cudaGetDriverEntryPoint: null argument");
  const bool found = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  *funcPtr = found ? reinterpret_cast<void*>(&gt::emu::encode_tensor_map_tiled) : nullptr;
  if (driverStatus)
    *driverStatus = found ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  GT_EMU_ENTRY();
  return after_wait(emu.synchronize_all() == cudaSuccess);
}

// Real semantics: destroys the primary context. Here: drops queued work and
// clears the errors, so a test can go on after provoking a device fault;
// allocations, streams and events stay valid (their owners free them).
cudaError_t cudaDeviceReset(void) {
  Emulator& emu = Emulator::get();
  Lock lock(emu.mu);
  emu.streams.drop_all();
  gt::emu::clear_errors();
  return cudaSuccess;
}

// ---- errors ---------------------------------------------------------------------------

cudaError_t cudaGetLastError(void) { return gt::emu::take_last_error(); }
cudaError_t cudaPeekAtLastError(void) { return gt::emu::peek_last_error(); }
const char* cudaGetErrorString(cudaError_t e) { return gt::emu::error_string(e); }
const char* cudaGetErrorName(cudaError_t e) { return gt::emu::error_name(e); }

// ---- memory ---------------------------------------------------------------------------

cudaError_t cudaMalloc(void** p, size_t bytes) {
  GT_EMU_ENTRY();
  if (!p) return fail(cudaErrorInvalidValue, "cudaMalloc: null result pointer");
  *p = nullptr;
  if (emu.device_count() == 0) return fail(cudaErrorNoDevice);
  const int d = gt::emu::current_device();
  if (emu.memory.device_bytes(d) + bytes > gt::emu::kDeviceMemoryBytes ||
      !emu.memory.allocate(p, bytes, d, false))
    return fail(cudaErrorMemoryAllocation);
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  Emulator& emu = Emulator::get();
  Lock lock(emu.mu);
  if (!p) return cudaSuccess;
  // cudaFree synchronises the device: queued work may still use the memory.
  const cudaError_t sync = emu.synchronize_all();
  if (!emu.memory.release(p, false))
    return fail(cudaErrorInvalidValue,
                "cudaFree(" + address(p) + "): not the start of a live device allocation");
  return sync;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  GT_EMU_ENTRY();
  if (!p) return fail(cudaErrorInvalidValue, "cudaMallocHost: null result pointer");
  if (!emu.memory.allocate(p, bytes, gt::emu::current_device(), true))
    return fail(cudaErrorMemoryAllocation);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) { return cudaMallocHost(p, bytes); }

cudaError_t cudaFreeHost(void* p) {
  Emulator& emu = Emulator::get();
  Lock lock(emu.mu);
  if (!p) return cudaSuccess;
  const cudaError_t sync = emu.synchronize_all();
  if (!emu.memory.release(p, true))
    return fail(cudaErrorInvalidValue,
                "cudaFreeHost(" + address(p) + "): not the start of a cudaMallocHost allocation");
  return sync;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  GT_EMU_ENTRY();
  if (!free_bytes || !total) return fail(cudaErrorInvalidValue);
  *total = gt::emu::kDeviceMemoryBytes;
  *free_bytes = *total - emu.memory.device_bytes(gt::emu::current_device());
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  GT_EMU_ENTRY();
  CUstream_st* s = gt::emu::stream_for(stream, "cudaMemcpyAsync");
  if (!s) return cudaErrorInvalidResourceHandle;
  if (cudaError_t r = check_copy("cudaMemcpyAsync", dst, src, n, &kind)) return r;
  if (n) enqueue_copy(s, dst, src, n, kind);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  GT_EMU_ENTRY();
  if (cudaError_t r = check_copy("cudaMemcpy", dst, src, n, &kind)) return r;
  if (!n) return cudaSuccess;
  // On the legacy default stream, and the host waits for it.
  CUstream_st* s = gt::emu::stream_for(nullptr, "cudaMemcpy");
  enqueue_copy(s, dst, src, n, kind);
  return after_wait(wait_for([s] { return s->queue.empty(); }));
}

// `height` rows of `width` bytes, rows `spitch` and `dpitch` bytes apart. Each
// side's whole span, first row to last, must lie in one allocation (or host
// memory): what the real runtime requires of a pitched copy too.
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
  GT_EMU_ENTRY();
  if (width == 0 || height == 0) return cudaSuccess;
  if (dpitch < width || spitch < width)
    return fail(cudaErrorInvalidPitchValue,
                "cudaMemcpy2D: width " + std::to_string(width) + " exceeds a pitch (dpitch " +
                    std::to_string(dpitch) + ", spitch " + std::to_string(spitch) + ")");
  const size_t dspan = (height - 1) * dpitch + width, sspan = (height - 1) * spitch + width;
  // check_copy checks one length on both sides: check each side's own span.
  cudaMemcpyKind k = kind;
  if (cudaError_t r = check_copy("cudaMemcpy2D", dst, src, std::min(dspan, sspan), &k)) return r;
  const bool dst_dev = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
  const bool src_dev = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
  if (cudaError_t r = check_side("cudaMemcpy2D", "destination", dst, dspan, dst_dev)) return r;
  if (cudaError_t r = check_side("cudaMemcpy2D", "source", src, sspan, src_dev)) return r;
  // On the legacy default stream, and the host waits for it, so a pageable
  // source needs no staging copy.
  CUstream_st* s = gt::emu::stream_for(nullptr, "cudaMemcpy2D");
  emu.streams.enqueue_task(
      s,
      "memcpy2D " + std::string(kind_name(k)) + " of " + std::to_string(height) + " rows of " +
          std::to_string(width) + " bytes",
      [=] {
        for (size_t r = 0; r < height; ++r)
          std::memmove(static_cast<unsigned char*>(dst) + r * dpitch,
                       static_cast<const unsigned char*>(src) + r * spitch, width);
      });
  return after_wait(wait_for([s] { return s->queue.empty(); }));
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
  GT_EMU_ENTRY();
  CUstream_st* s = gt::emu::stream_for(stream, "cudaMemsetAsync");
  if (!s) return cudaErrorInvalidResourceHandle;
  if (n == 0) return cudaSuccess;
  if (cudaError_t r = check_side("cudaMemsetAsync", "destination", p, n, true)) return r;
  emu.streams.enqueue_task(s, "memset of " + std::to_string(n) + " bytes",
                           [p, value, n] { std::memset(p, value, n); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
  GT_EMU_ENTRY();
  if (n == 0) return cudaSuccess;
  if (cudaError_t r = check_side("cudaMemset", "destination", p, n, true)) return r;
  CUstream_st* s = gt::emu::stream_for(nullptr, "cudaMemset");
  emu.streams.enqueue_task(s, "memset of " + std::to_string(n) + " bytes",
                           [p, value, n] { std::memset(p, value, n); });
  return after_wait(wait_for([s] { return s->queue.empty(); }));
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  GT_EMU_ENTRY();
  if (!attr) return fail(cudaErrorInvalidValue);
  std::memset(attr, 0, sizeof *attr);
  const gt::emu::Allocation* a = emu.memory.find(p);
  attr->type = !a ? cudaMemoryTypeUnregistered : a->pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  attr->device = a ? a->device : -2;
  attr->devicePointer = a && !a->pinned ? const_cast<void*>(p) : nullptr;
  attr->hostPointer = a && a->pinned ? const_cast<void*>(p) : nullptr;
  return cudaSuccess;
}

// ---- streams --------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  GT_EMU_ENTRY();
  if (!s) return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: null stream");
  if (flags & ~static_cast<unsigned>(cudaStreamNonBlocking))
    return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: unknown flags");
  *s = emu.streams.create_stream(gt::emu::current_device(), flags);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(s, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Emulator& emu = Emulator::get();
  Lock lock(emu.mu);
  if (!emu.streams.destroy_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  return gt::emu::sticky_error();
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  GT_EMU_ENTRY();
  CUstream_st* s = gt::emu::stream_for(stream, "cudaStreamSynchronize");
  if (!s) return cudaErrorInvalidResourceHandle;
  return after_wait(wait_for([s] { return s->queue.empty(); }));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  GT_EMU_ENTRY();
  CUstream_st* s = gt::emu::stream_for(stream, "cudaStreamQuery");
  if (!s) return cudaErrorInvalidResourceHandle;
  if (emu.streams.run_until([s] { return s->queue.empty(); }, StreamScheduler::Mode::poll))
    return cudaSuccess;
  if (cudaError_t st = gt::emu::sticky_error()) return st;
  return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  GT_EMU_ENTRY();
  CUstream_st* s = gt::emu::stream_for(stream, "cudaStreamWaitEvent");
  if (!s) return cudaErrorInvalidResourceHandle;
  auto e = emu.streams.find_event(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live event");
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags must be 0");
  emu.streams.enqueue_wait(s, e);
  return cudaSuccess;
}

// ---- events ---------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  GT_EMU_ENTRY();
  if (!e) return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: null event");
  *e = emu.streams.create_event(gt::emu::current_device(), flags).get();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  Emulator& emu = Emulator::get();
  Lock lock(emu.mu);
  if (!emu.streams.destroy_event(e))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
  return gt::emu::sticky_error();
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  GT_EMU_ENTRY();
  auto e = emu.streams.find_event(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event");
  CUstream_st* s = gt::emu::stream_for(stream, "cudaEventRecord");
  if (!s) return cudaErrorInvalidResourceHandle;
  emu.streams.enqueue_record(s, e);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  GT_EMU_ENTRY();
  auto e = emu.streams.find_event(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: not a live event");
  const uint64_t want = e->recorded;
  return after_wait(wait_for([e, want] { return e->completed >= want; }));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  GT_EMU_ENTRY();
  auto e = emu.streams.find_event(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: not a live event");
  const uint64_t want = e->recorded;
  if (emu.streams.run_until([e, want] { return e->completed >= want; },
                            StreamScheduler::Mode::poll))
    return cudaSuccess;
  if (cudaError_t st = gt::emu::sticky_error()) return st;
  return cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  GT_EMU_ENTRY();
  auto a = emu.streams.find_event(start), b = emu.streams.find_event(end);
  if (!ms || !a || !b) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: bad event");
  if ((a->flags | b->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
  if (a->recorded == 0 || b->recorded == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
  if (a->completed < a->recorded || b->completed < b->recorded) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
  return cudaSuccess;
}

// ---- kernels ----------------------------------------------------------------------------

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  GT_EMU_ENTRY();
  if (!func) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: null function");
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > gt::emu::kMaxSharedPerBlockOptin)
      return fail(cudaErrorInvalidValue,
                  "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize, " +
                      std::to_string(value) + "): the device allows at most " +
                      std::to_string(gt::emu::kMaxSharedPerBlockOptin));
    emu.max_dynamic_smem[func] = value;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return fail(cudaErrorNotSupported, "cudaFuncSetAttribute: attribute " +
                                         std::to_string(static_cast<int>(attr)) +
                                         " is not emulated");
}

}  // extern "C"
