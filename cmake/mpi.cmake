# TENAX_MPI=AUTO|ON|OFF: sharded axes over MPI are optional; AUTO builds them when MPI is found.
set(TENAX_HAVE_MPI OFF)
if(NOT TENAX_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX TRUE)  # the C API from C++; not the removed C++ bindings
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(TENAX_HAVE_MPI ON)
  elseif(TENAX_MPI STREQUAL "ON")
    message(FATAL_ERROR "TENAX_MPI=ON but no MPI was found (install libopenmpi-dev and openmpi-bin)")
  endif()
endif()
message(STATUS "tenax: MPI ${TENAX_HAVE_MPI}")
