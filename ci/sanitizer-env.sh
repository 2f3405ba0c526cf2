# The sanitizer settings of the ASan+UBSan build and the fuzzers; source it. Full stack
# unwinding on malloc (fast_unwind_on_malloc=0) so that leaks inside Open MPI match
# ci/lsan.supp; undefined behaviour stops the program with a stack.
sanitizer_ci_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:check_initialization_order=1:strict_init_order=1:detect_odr_violation=0"
export LSAN_OPTIONS="suppressions=$sanitizer_ci_dir/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
