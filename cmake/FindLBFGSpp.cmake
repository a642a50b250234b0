# Debian's liblbfgspp-dev ships headers only, without a CMake package: this module finds them and
# defines the interface target LBFGSpp::LBFGSpp (it needs Eigen3::Eigen).
find_path(LBFGSpp_INCLUDE_DIR NAMES LBFGS.h PATH_SUFFIXES include)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LBFGSpp REQUIRED_VARS LBFGSpp_INCLUDE_DIR)
if(LBFGSpp_FOUND AND NOT TARGET LBFGSpp::LBFGSpp)
  add_library(LBFGSpp::LBFGSpp INTERFACE IMPORTED)
  set_target_properties(LBFGSpp::LBFGSpp PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${LBFGSpp_INCLUDE_DIR}")
endif()
mark_as_advanced(LBFGSpp_INCLUDE_DIR)
