// Device support for recorded scan programs (core/ops/capture.h): device copies of a program's
// argument blocks, its deferred failure words, and CUDA graphs that replay a run of its kernel
// calls with one launch.
#include <cuda_runtime.h>

#include <string>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail {
namespace {

using cuda::check;

void* upload(const void* host, std::size_t bytes, const void* near) {
  cuda::use_device_of(near, "program upload");
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "program upload");
  const cudaError_t e = cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    (void)cudaFree(p);
    check(e, "program upload");
  }
  return p;
}

void release(void* p) {
  if (p && cuda::use_device_of_quiet(p)) (void)cudaFree(p);
  (void)cudaGetLastError();
}

unsigned long long read_word(const void* p) {
  cuda::use_device_of(p, "program check");
  check(cudaStreamSynchronize(cudaStreamPerThread), "program check");
  unsigned long long w = 0;
  check(cudaMemcpy(&w, p, sizeof w, cudaMemcpyDeviceToHost), "program check");
  return w;
}

struct Graph {
  cudaGraphExec_t exec = nullptr;
  int device = 0;
};

void* capture_graph(void (*body)(void*), void* ctx, const void* near) {
  const int device = cuda::use_device_of(near, "graph capture");
  check(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal), "graph capture");
  cudaGraph_t graph = nullptr;
  {
    cuda::NotCounting quiet;  // recorded, not launched
    try {
      body(ctx);
    } catch (...) {
      (void)cudaStreamEndCapture(cudaStreamPerThread, &graph);
      if (graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      throw;
    }
  }
  check(cudaStreamEndCapture(cudaStreamPerThread, &graph), "graph capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  check(e, "graph instantiate");
  return new Graph{exec, device};
}

void launch_graph(void* g) {
  auto* graph = static_cast<Graph*>(g);
  check(cudaSetDevice(graph->device), "graph launch");
  check(cudaGraphLaunch(graph->exec, cudaStreamPerThread), "graph launch");
  cuda::count_launches();
}

void destroy_graph(void* g) {
  auto* graph = static_cast<Graph*>(g);
  if (!graph) return;
  if (cudaSetDevice(graph->device) == cudaSuccess) (void)cudaGraphExecDestroy(graph->exec);
  (void)cudaGetLastError();
  delete graph;
}

}  // namespace

void register_cuda_programs(KernelTable& t) {
  t.program.upload = upload;
  t.program.release = release;
  t.program.read_word = read_word;
  t.program.capture_graph = capture_graph;
  t.program.launch_graph = launch_graph;
  t.program.destroy_graph = destroy_graph;
}

}  // namespace tenax::detail
