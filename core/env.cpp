// The environment variables Tenax reads and their one parser (core/env.h).
#include "tenax/core/env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tenax/core/error.h"

namespace tenax::detail {
namespace {

using K = EnvVariable::Kind;

constexpr EnvVariable kEnvironment[] = {
    {"TENAX_NUM_THREADS", K::integer, "every core",
     "threads for Tenax's parallel loops, for the whole process (also tenax::set_num_threads)", 1, 1 << 20},
    {"TENAX_CHECK_FINITE", K::flag, "0",
     "1: every op's output and every adjoint is checked; the first NaN/Inf raises NumericError naming the op"},
    {"TENAX_HOST_CACHE_MB", K::integer, "1024",
     "MiB of freed host blocks kept for reuse process-wide: those over 16 MiB, and those from 256 KiB that a thread's own lists do not keep; the oldest go first (0: none kept)", 0, int64_t{1} << 40},
    {"TENAX_SCALAR_LOOPS", K::flag, "1",
     "0: scans over single elements replay call by call instead of as one fused loop of scalar instructions"},
    {"TENAX_SCALAR_JIT", K::flag, "1",
     "0: fused scalar loops keep running through the lowered code's handlers instead of as machine code "
     "(built on x86-64 Linux after a loop's first 256 steps)"},
    {"TENAX_SCAN_IN_PLACE", K::flag, "1",
     "0: host scans copy each step's slice of their scanned inputs, and each new carry that is also an output, "
     "into a buffer instead of reading them in place"},
    {"TENAX_SCAN_TANGENT_PROGRAM", K::flag, "1",
     "0: forward mode through a host scan runs each step's ops and JVP rules op by op instead of replaying "
     "kernel programs captured at the first steps"},
    {"TENAX_CPU_AVX2", K::flag, "1 (where the CPU has AVX2 and FMA)",
     "0: the CPU code that has an AVX2 build (tridiagonal solves, small contractions, complex products, the "
     "unary ops' vector forms, the replay's handlers) runs its SSE2 build"},
    {"TENAX_TRIDIAGONAL_FETCH", K::flag, "by size: on where a call's arrays pass half the last-level cache",
     "1 / 0: rows-inner tridiagonal panels prefetch / do not prefetch the next panel's operands"},
    {"TENAX_TRIDIAGONAL_CHUNKS", K::flag, "1",
     "0: solves with systems back to back from memory run on panels instead of SIMD lanes walking chunks"},
    {"TENAX_CUDA_GRAPHS", K::flag, "1", "0: scans on a GPU launch kernel by kernel instead of replaying CUDA graphs"},
    {"TENAX_CUDA_FUSION", K::flag, "1",
     "0: each small kernel of a scan step on a GPU runs alone instead of in fused one-block chains"},
};

const EnvVariable& listed(const char* name) {
  for (const EnvVariable& v : kEnvironment)
    if (std::strcmp(v.name, name) == 0) return v;
  throw Error(std::string("[environment] internal: ") + name + " is not listed in core/env.cpp");
}

[[noreturn]] void refuse(const EnvVariable& v, const char* value) {
  const std::string takes = v.kind == K::flag ? "0 or 1"
                                              : "an integer from " + std::to_string(v.min) + " to " +
                                                    std::to_string(v.max);
  throw Error(std::string("[environment] ") + v.name + "='" + value + "': expected " + takes + " (" + v.purpose +
              "; unset: " + v.fallback + ")");
}

const char* value_of(const EnvVariable& v) {
  const char* s = std::getenv(v.name);
  return s && *s ? s : nullptr;
}

}  // namespace

std::span<const EnvVariable> environment_variables() { return kEnvironment; }

std::optional<bool> env_flag(const char* name) {
  const EnvVariable& v = listed(name);
  const char* s = value_of(v);
  if (!s) return std::nullopt;
  if (std::strcmp(s, "0") == 0) return false;
  if (std::strcmp(s, "1") == 0) return true;
  refuse(v, s);
}

std::optional<int64_t> env_integer(const char* name) {
  const EnvVariable& v = listed(name);
  const char* s = value_of(v);
  if (!s) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(s, &end, 10);
  if (*end != '\0' || errno == ERANGE || n < v.min || n > v.max) refuse(v, s);
  return n;
}

void validate_environment() {
  for (const EnvVariable& v : kEnvironment)
    if (v.kind == K::flag)
      (void)env_flag(v.name);
    else
      (void)env_integer(v.name);
}

}  // namespace tenax::detail
