# Installs the build tree into a fresh prefix, then configures, builds and runs the consumer: as a
# CPU program with the CUDA toolkit hidden (a FindCUDAToolkit.cmake that fails if anything looks),
# checking that it needs no CUDA library; and, where the package has the CUDA backend, as a program
# linking tenax::cuda. Arguments: -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE_DIR=... -DGENERATOR=...
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
file(WRITE ${WORK_DIR}/hidden/FindCUDAToolkit.cmake
     "message(FATAL_ERROR \"the CPU consumer's configuration looked for the CUDA toolkit\")\n")

function(consumer name)
  set(dir ${WORK_DIR}/${name})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${dir}
                          -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release ${ARGN}
                  RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "configuring the ${name} consumer against the installed package failed: ${rc}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${dir} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "building the ${name} consumer failed: ${rc}")
  endif()
  execute_process(COMMAND ${dir}/app RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "the ${name} consumer ran but returned ${rc}")
  endif()
endfunction()

consumer(cpu -DCMAKE_MODULE_PATH=${WORK_DIR}/hidden)
file(GET_RUNTIME_DEPENDENCIES EXECUTABLES ${WORK_DIR}/cpu/app RESOLVED_DEPENDENCIES_VAR deps
     UNRESOLVED_DEPENDENCIES_VAR unresolved)
foreach(dep IN LISTS deps unresolved)
  if(dep MATCHES "cudart|cusparse|cublas|nvJitLink")
    message(FATAL_ERROR "the CPU consumer needs ${dep}")
  endif()
endforeach()
message(STATUS "installed package: a CPU consumer found it with the CUDA toolkit hidden, built and ran, without CUDA libraries")
file(GLOB cuda_targets ${WORK_DIR}/prefix/lib*/cmake/tenax/tenaxCudaTargets.cmake)
if(cuda_targets)
  consumer(cuda -DWITH_CUDA=ON)
  message(STATUS "installed package: a consumer of the cuda component built against the backend and ran")
endif()
