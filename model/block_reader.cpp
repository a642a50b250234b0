// A rank's block of a CSV or raw binary data file.
#include "tenax/model/block_reader.h"

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "tenax/core/creation.h"
#include "tenax/core/distributed_impl.h"
#include "tenax/model/values.h"

namespace tenax {
namespace {

Tensor read_binary_block(const std::filesystem::path& path, const Axes& block, int64_t first, int64_t total) {
  const std::string where = "[read_block] " + path.string();
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) throw Error(where + ": cannot read the file (" + ec.message() + ")");
  if (bytes != static_cast<uintmax_t>(total) * sizeof(double))
    throw Error(where + " holds " + std::to_string(bytes) + " bytes; " + std::to_string(total) +
                " float64 values need " + std::to_string(total * 8));
  std::ifstream in(path, std::ios::binary);
  std::vector<double> v(static_cast<size_t>(block.numel()));
  in.seekg(static_cast<std::streamoff>(first * 8));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
  if (!in) throw Error(where + ": reading " + std::to_string(v.size()) + " values failed");
  for (size_t k = 0; k < v.size(); ++k)
    if (!std::isfinite(v[k]))
      throw Error(where + ": value " + std::to_string(first + static_cast<int64_t>(k)) + " is not finite");
  return tensor(v, block);
}

}  // namespace

Tensor read_block(const std::filesystem::path& path, const Axes& axes, const Communicator& comm, DataFormat format) {
  if (axes.rank() == 0) throw AxisError("[read_block] the file's axes are empty: nothing to split");
  const Name axis = axes.name(0);
  const Block b = comm.block(axes.size(0));
  Axes block = axes;
  block.set_size(0, b.size);
  const int64_t inner = axes.numel() / axes.size(0);
  const Tensor local =
      format == DataFormat::binary
          ? read_binary_block(path, block, b.offset * inner, axes.numel())
          : model_detail::values_from_csv_block(path, block, DType::f64, "[read_block]", false, b.offset * inner,
                                                axes.numel());
  return detail::with_shard(local, detail::intern_sharding({axis, axes.size(0), b, comm}));
}

}  // namespace tenax
