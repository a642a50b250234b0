# `cmake --install` produces a relocatable package: headers under include/tenax/<layer>, the
# library, and tenaxConfig.cmake for find_package(tenax CONFIG).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tenax tenax_warnings EXPORT tenaxTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/tenax/tenax.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tenax)
foreach(layer core named autodiff backends model)
  install(DIRECTORY ${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tenax/${layer}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
endforeach()
install(EXPORT tenaxTargets NAMESPACE tenax:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tenax)
configure_package_config_file(cmake/tenaxConfig.cmake.in ${CMAKE_BINARY_DIR}/tenaxConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tenax)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/tenaxConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/tenaxConfig.cmake ${CMAKE_BINARY_DIR}/tenaxConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tenax)
