// Device support for recorded scan programs (core/ops/capture.h): device copies of a program's
// argument blocks, its deferred failure words, and CUDA graphs that replay a run of its kernel
// calls with one launch.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/fusion.h"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail::cuda {
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

// An executable graph; with moving chains (fusion.h) also the recorded graph, whose nodes they
// name, and the index they were last set to.
struct Graph {
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  int device = 0;
  int64_t nodes = 0;
  std::vector<cuda::MovingNode> moving;
  int64_t index = INT64_MIN;  // none set yet
};

void* capture_graph(void (*body)(void*), void* ctx, const void* near) {
  const int device = cuda::use_device_of(near, "graph capture");
  check(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal), "graph capture");
  cuda::g_moving_nodes.clear();
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
  std::size_t nodes = 0;
  cudaError_t e = cudaGraphGetNodes(graph, nullptr, &nodes);
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  auto* g = new Graph{exec, graph, device, static_cast<int64_t>(nodes), std::move(cuda::g_moving_nodes)};
  cuda::g_moving_nodes.clear();
  if (g->moving.empty() || e != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    g->graph = nullptr;
  }
  if (e != cudaSuccess) {
    delete g;
    check(e, "graph instantiate");
  }
  return g;
}

void launch_graph(void* g, int64_t index) {
  auto* graph = static_cast<Graph*>(g);
  check(cudaSetDevice(graph->device), "graph launch");
  if (!graph->moving.empty() && index != graph->index) {
    for (const cuda::MovingNode& m : graph->moving) cuda::set_chain_index(graph->exec, m, index);
    graph->index = index;
  }
  check(cudaGraphLaunch(graph->exec, cudaStreamPerThread), "graph launch");
  cuda::count_graph_launch(graph->nodes);
}

void destroy_graph(void* g) {
  auto* graph = static_cast<Graph*>(g);
  if (!graph) return;
  if (cudaSetDevice(graph->device) == cudaSuccess) {
    (void)cudaGraphExecDestroy(graph->exec);
    if (graph->graph) (void)cudaGraphDestroy(graph->graph);
  }
  (void)cudaGetLastError();
  delete graph;
}

}  // namespace

void register_programs(KernelTable& t) {
  t.program.upload = upload;
  t.program.release = release;
  t.program.read_word = read_word;
  t.program.capture_graph = capture_graph;
  t.program.launch_graph = launch_graph;
  t.program.destroy_graph = destroy_graph;
}

}  // namespace tenax::detail::cuda
