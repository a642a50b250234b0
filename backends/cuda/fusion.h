#pragma once
// Between the fused chains (fusion.cu) and the graphs (graph.cu) of the CUDA backend: a chain
// with a moving operand (a scan's slice copy) recorded into a graph is a kernel node whose index
// argument the graph sets before each launch.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace tenax::detail::cuda {

/// A recorded launch of a moving chain: its node in the graph being recorded, and the chain.
struct MovingNode {
  cudaGraphNode_t node = nullptr;
  const void* chain = nullptr;
};
/// The moving chains recorded on this thread since the list was last cleared (graph.cu clears it
/// before recording a graph and takes it after).
inline thread_local std::vector<MovingNode> g_moving_nodes;

/// Sets the index of a moving chain's node in an executable graph (fusion.cu).
void set_chain_index(cudaGraphExec_t exec, const MovingNode& m, int64_t index);

}  // namespace tenax::detail::cuda
