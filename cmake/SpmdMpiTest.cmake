# Tests under mpirun (docs/ARCHITECTURE.md "Tests under mpirun"): as root, shared memory
# only, more ranks than cores. Waiting ranks yield the core (mpi_yield_when_idle): the MPI
# backend's blocking collectives otherwise spin, and on a shared or oversubscribed machine
# the spinning ranks starve the ones they wait for (a property run took 45x as long).
set(SPMD_MPI_TEST_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_mpi_yield_when_idle=1")
set(SPMD_MPIEXEC_FLAGS --oversubscribe --mca pml ob1 --mca btl self,vader)

# spmd_add_mpi_test(<name> <target> NPS <n>... [LABELS <label>...] [TIMEOUT <s>]
#                   [ENVIRONMENT <VAR=value>...])
# One test <name>_np<n> per rank count: <target> under mpirun with <n> ranks. PROCESSORS 2, so
# that ctest runs no two MPI jobs side by side on two cores; SPMD_MPI_TEST_ENV comes first
# in the environment.
function(spmd_add_mpi_test name target)
  cmake_parse_arguments(ARG "" "TIMEOUT" "NPS;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  foreach(np ${ARG_NPS})
    add_test(NAME ${name}_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${SPMD_MPIEXEC_FLAGS}
                     $<TARGET_FILE:${target}>)
    set_tests_properties(${name}_np${np} PROPERTIES
      LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT} PROCESSORS 2
      ENVIRONMENT "${SPMD_MPI_TEST_ENV};${ARG_ENVIRONMENT}")
  endforeach()
endfunction()
