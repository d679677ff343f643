# dikkat_add_tests(GLOB <pattern> LIBS <targets...> [LABELS <labels...>])
# Builds one test executable per *_test.cc file so that a slow or broken
# suite only costs its own target, and registers each executable as one ctest
# test. (Not one ctest test per gtest case: many suites build fixtures once in
# SetUpTestSuite with Debian's PyTorch or npm, and a process per case would
# redo that work for every case.) `ctest --output-on-failure` shows which
# cases failed.
#
# Sanitizer builds: undefined behaviour fails the test (GCC's UBSan only
# prints by default), and the third-party leaks in tests/sanitizers/lsan.supp
# are not reported. Servers that integration tests start inherit this.
set(DIKKAT_SANITIZER_TEST_ENV "")
if(DIKKAT_SANITIZE STREQUAL "address")
  set(DIKKAT_SANITIZER_TEST_ENV
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
      "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/lsan.supp")
elseif(DIKKAT_SANITIZE STREQUAL "thread")
  # Every report is printed; the process then exits 66 and the test fails.
  # ignore_noninstrumented_modules: libgomp (LibTorch's OpenMP) is not built
  # with TSan, and clang's runtime asks for this to keep its internal
  # synchronisation from being reported.
  set(DIKKAT_SANITIZER_TEST_ENV
      "TSAN_OPTIONS=second_deadlock_stack=1:history_size=4:ignore_noninstrumented_modules=1")
endif()
function(dikkat_add_tests)
  cmake_parse_arguments(ARG "" "GLOB" "LIBS;LABELS" ${ARGN})
  file(GLOB test_sources CONFIGURE_DEPENDS ${ARG_GLOB})
  foreach(src ${test_sources})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
    target_compile_definitions(${name} PRIVATE
      DIKKAT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
      DIKKAT_BINARY_DIR="${PROJECT_BINARY_DIR}")
    add_test(NAME ${name} COMMAND ${name} --gtest_brief=1)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 900
                         ENVIRONMENT "${DIKKAT_SANITIZER_TEST_ENV}")
  endforeach()
endfunction()
