// Tenax's collectives over MPI: byte allgathers on a duplicate of the host's communicator.
#include <mpi.h>

#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "tenax/core/distributed_impl.h"

namespace tenax::detail {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("[mpi] ") + what + " failed: " + std::string(text, static_cast<size_t>(len)));
}

int as_count(int64_t bytes) {
  if (bytes > INT_MAX)
    throw MemoryError("[mpi] one rank's share of a collective is " + std::to_string(bytes) +
                      " bytes; MPI counts stop at 2^31 - 1");
  return static_cast<int>(bytes);
}

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm host) {
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    if (!initialised || finalised)
      throw Error("[mpi] MPI is not initialised (or already finalised): the host program calls MPI_Init first");
    check(MPI_Comm_dup(host, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // The duplicate is freed when MPI_Finalize deletes MPI_COMM_SELF's attributes (before MPI
    // shuts down), or with this object if it goes first.
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_at_finalize, &key_, nullptr);
    MPI_Comm_set_attr(MPI_COMM_SELF, key_, this);
  }
  ~MpiTransport() override {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (finalised) return;
    MPI_Comm_delete_attr(MPI_COMM_SELF, key_);  // frees the duplicate and the key through free_at_finalize
  }
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int size() const override { return size_; }
  void allgather(const void* send, int64_t bytes, void* recv) override {
    const int n = as_count(bytes);
    check(MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_), "MPI_Allgather");
  }
  void allgatherv(const void* send, const std::vector<int64_t>& counts, void* recv) override {
    std::vector<int> n(counts.size()), at(counts.size());
    int64_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      n[r] = as_count(counts[r]);
      at[r] = as_count(offset);
      offset += counts[r];
    }
    check(MPI_Allgatherv(send, n[static_cast<size_t>(rank_)], MPI_BYTE, recv, n.data(), at.data(), MPI_BYTE, comm_),
          "MPI_Allgatherv");
  }
  [[nodiscard]] const void* key() const override { return this; }
  [[nodiscard]] const char* kind() const override { return "MPI"; }

 private:
  static int free_at_finalize(MPI_Comm, int, void* self, void*) {
    auto* t = static_cast<MpiTransport*>(self);
    if (t->comm_ != MPI_COMM_NULL) MPI_Comm_free(&t->comm_);
    MPI_Comm_free_keyval(&t->key_);
    return MPI_SUCCESS;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int key_ = MPI_KEYVAL_INVALID;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool built_with_mpi() { return true; }

std::shared_ptr<Transport> mpi_world_transport() {
  static const std::shared_ptr<Transport> world = std::make_shared<MpiTransport>(MPI_COMM_WORLD);
  return world;
}

std::shared_ptr<Transport> mpi_transport(const void* handle, size_t handle_bytes) {
  MPI_Comm comm;
  if (handle_bytes != sizeof comm) throw Error("[mpi] the MPI_Comm handle's size differs from this build's MPI");
  std::memcpy(&comm, handle, sizeof comm);
  return std::make_shared<MpiTransport>(comm);
}

}  // namespace tenax::detail
