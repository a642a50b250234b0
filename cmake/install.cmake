# `cmake --install` produces a relocatable package: headers under include/tenax/<layer>, the
# library, and tenaxConfig.cmake for find_package(tenax CONFIG).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tenax tenax_warnings EXPORT tenaxTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Only the public headers: the umbrella header and what it includes, plus the xtensor interop.
# Everything else (backends, op definitions, capture, the model's internals) is library-internal;
# the install test compiles every installed header alone against the installed package, so a
# public header that includes an internal one fails there.
set(TENAX_PUBLIC_HEADERS
  autodiff/associative_scan.h autodiff/compile.h autodiff/custom_vjp.h autodiff/grad.h autodiff/jacobian.h autodiff/map.h
  autodiff/memory_report.h autodiff/nmap.h autodiff/scan.h autodiff/tape.h
  core/check_finite.h core/creation.h core/distributed.h core/device.h core/dtype.h core/error.h core/ops.h
  core/ops/elementwise.def core/storage.h core/tensor.h core/threads.h core/transfer.h core/xtensor.h
  model/block_reader.h model/model.h model/model_axes.h named/axes.h named/name.h)
install(FILES include/tenax/tenax.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tenax)
if(TENAX_HAVE_MPI)
  install(FILES include/tenax/mpi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tenax)
endif()
foreach(header IN LISTS TENAX_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tenax/${dir})
endforeach()
install(EXPORT tenaxTargets NAMESPACE tenax:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tenax)
# The CUDA backend: its objects and their own export set, which the package config loads only for
# a consumer asking for the component (find_package(tenax COMPONENTS cuda)); a CPU consumer never
# looks for the CUDA toolkit.
if(TENAX_HAVE_CUDA)
  install(TARGETS tenax_cuda EXPORT tenaxCudaTargets OBJECTS DESTINATION ${CMAKE_INSTALL_LIBDIR}/tenax_cuda)
  install(EXPORT tenaxCudaTargets NAMESPACE tenax:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tenax)
endif()
configure_package_config_file(cmake/tenaxConfig.cmake.in ${CMAKE_BINARY_DIR}/tenaxConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tenax)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/tenaxConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/tenaxConfig.cmake ${CMAKE_BINARY_DIR}/tenaxConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tenax)
