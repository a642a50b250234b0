# Fails unless each AVX2 member of libtenax (tridiagonal_avx2.cpp.o, contract_avx2.cpp.o,
# complex_avx2.cpp.o, unary_avx2.cpp.o, threaded_replay_avx2.cpp.o) defines no
# external symbol but its entry points (backends/cpu/avx2.h; core/ops/capture.h run_threaded_avx2): an inline or template function
# compiled with -mavx2 and also emitted by another file is one definition the linker may pick for
# every caller, which would crash a CPU without AVX2.
# Usage: cmake -DNM=<nm> -DLIB=<libtenax.a> -P check_avx2_symbols.cmake
execute_process(COMMAND ${NM} --defined-only ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} ${LIB} failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${out}")
set(in_member OFF)
set(found "")
set(bad "")
foreach(line IN LISTS lines)
  if(line MATCHES "^(.*\\.o):$")
    set(member "${CMAKE_MATCH_1}")
    if(member MATCHES "_avx2\\.cpp\\.o$")
      set(in_member ON)
      list(APPEND found "${member}")
    else()
      set(in_member OFF)
    endif()
  elseif(in_member AND line MATCHES "^[0-9a-f]* ([A-Za-z]) (.*)$")
    set(kind "${CMAKE_MATCH_1}")
    set(name "${CMAKE_MATCH_2}")
    # Upper case: external (T, D, B, R, W, V, u); lower case: local to the object. A template
    # instantiated on xsimd's avx2 types ("4avx2E" in the mangled name; an unoptimised build keeps
    # them out of line) is reachable only from AVX2 code, so no baseline caller can bind to it.
    if(kind MATCHES "^[A-Zu]$" AND NOT name MATCHES "4avx2E" AND NOT name MATCHES "(thomas_range|shared_range|fixed_kernel|chunked_range|chunkable|complex_product|unary|run_threaded)_avx2" AND NOT name MATCHES "^DW\\.ref\\.__gxx_personality_v0$")
      list(APPEND bad "${kind} ${name}")
    endif()
  endif()
endforeach()
list(LENGTH found members)
if(NOT members EQUAL 5)
  message(FATAL_ERROR "expected the five AVX2 objects in ${LIB}, found: ${found}")
endif()
if(bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "the AVX2 object exports symbols another object may define too:\n  ${bad}")
endif()
message(STATUS "the AVX2 objects export their entry points and avx2-typed instantiations only")
