#pragma once
// Reading a rank's block of a data file whose outermost axis is sharded: only the block's values
// are read (binary: one seek and one read; CSV: the other lines are counted, not converted).
#include <filesystem>

#include "tenax/core/distributed.h"
#include "tenax/core/tensor.h"

namespace tenax {

enum class DataFormat {
  csv,     ///< numbers row-major over the axes, as model files read CSV (an optional header line)
  binary,  ///< raw float64 in the machine's byte order, row-major over the axes, nothing else
};

/// This rank's block of the file `path`, which holds a tensor with `axes` (global sizes) written
/// row-major: the block `comm.block(size)` of the first axis, sharded along it over `comm`
/// (float64). A collective only in that every rank calls it; no data moves between ranks. Throws
/// Error naming the file (and for CSV its line and column) when it holds another number of values
/// or a value that is not a finite number.
Tensor read_block(const std::filesystem::path& path, const Axes& axes, const Communicator& comm,
                  DataFormat format = DataFormat::csv);

}  // namespace tenax
