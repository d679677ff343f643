# dikkat_add_tests(GLOB <pattern> LIBS <targets...> [LABELS <labels...>])
# Builds one test executable per *_test.cc file so that a slow or broken
# suite only costs its own target, and registers each gtest case with ctest.
include(GoogleTest)
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
    gtest_discover_tests(${name}
      DISCOVERY_MODE PRE_TEST
      DISCOVERY_TIMEOUT 60
      PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 600)
  endforeach()
endfunction()
