# The C++ package: `cmake --install build --prefix P` installs the libraries, their headers,
# the `spmd` command and a CMake package, so that a project outside this tree writes
#
#   find_package(spmdkit CONFIG REQUIRED)            # or COMPONENTS mpi for the MPI runtime
#   target_link_libraries(app PRIVATE spmdkit::runtime)
#
# Layout under P:
#   lib/libspmd_*.a                        the static libraries (position-independent)
#   include/spmdkit/<folder>/<name>.h      the headers, one folder per layer, so that the
#                                          include lines users write are those of this
#                                          repository (#include "rules/engine/registry.h"): the
#                                          targets put include/spmdkit on the include path
#   bin/spmd                               the command-line tool
#   lib/cmake/spmdkit/                     spmdkitConfig.cmake and the exported targets
#
# Targets (each carries its dependencies; C++20 is required of the consumer):
#   spmdkit::rules      mesh, dist attrs, every op's rule, the reshard planner
#   spmdkit::reference  float64 reference of every op            (needs rules)
#   spmdkit::kernels    CPU kernels, Tensor, the Backend seam       (rules; BLAS when built with OpenBLAS)
#   spmdkit::checker    the rule checker                           (reference, Threads)
#   spmdkit::runtime    Communicator, threads backend, DistTensor, Dispatch (kernels, Threads)
#   spmdkit::train      autograd, optimizers, layouts, the GPT, checkpoints (runtime)
#   spmdkit::io         the JSON protocol of `spmd infer`          (checker, nlohmann_json)
#   spmdkit::runtime_mpi  the Open MPI backend, component `mpi`    (runtime, MPI::MPI_CXX)
# nlohmann_json is a public dependency of io only: io's headers take and return
# nlohmann::json. The MPI targets sit in their own export file, loaded when MPI is found,
# so that a consumer of the other targets needs no MPI.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SPMDKIT_VERSION 0.1.0)
set(SPMDKIT_INCLUDE_SUBDIR ${CMAKE_INSTALL_INCLUDEDIR}/spmdkit)
set(SPMDKIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/spmdkit)

set(spmdkit_core_targets spmd_rules spmd_reference spmd_kernels spmd_checker spmd_runtime spmd_train spmd_io)
foreach(target IN LISTS spmdkit_core_targets ITEMS spmd_runtime_mpi)
  string(REGEX REPLACE "^spmd_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  target_include_directories(${target} INTERFACE $<INSTALL_INTERFACE:${SPMDKIT_INCLUDE_SUBDIR}>)
  # Position-independent, so that a consumer (or the Python extension) may link them into
  # a shared library.
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endforeach()
# The headers use C++20; consumers get it from the targets.
target_compile_features(spmd_rules PUBLIC cxx_std_20)

install(TARGETS ${spmdkit_core_targets} EXPORT spmdkitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS spmd_runtime_mpi EXPORT spmdkitMpiTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS spmd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Every header of the installed layers, but the test helpers (runtime/testing/ and the
# *_test_util.h files: they need GoogleTest, RapidCheck or the simulated devices).
foreach(folder rules reference kernels checker runtime train io)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/ DESTINATION ${SPMDKIT_INCLUDE_SUBDIR}/${folder}
          FILES_MATCHING PATTERN "*.h"
          PATTERN "*_test_util.h" EXCLUDE
          PATTERN "testing" EXCLUDE)
endforeach()

install(EXPORT spmdkitTargets NAMESPACE spmdkit:: DESTINATION ${SPMDKIT_CMAKE_DIR})
install(EXPORT spmdkitMpiTargets NAMESPACE spmdkit:: DESTINATION ${SPMDKIT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/spmdkitConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/spmdkitConfig.cmake
                              INSTALL_DESTINATION ${SPMDKIT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/spmdkitConfigVersion.cmake
                                 VERSION ${SPMDKIT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/spmdkitConfig.cmake
              ${PROJECT_BINARY_DIR}/spmdkitConfigVersion.cmake
        DESTINATION ${SPMDKIT_CMAKE_DIR})
