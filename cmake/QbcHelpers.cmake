# Helpers shared by every stage's CMakeLists.txt.
#
# qbc_add_library(NAME SOURCES ... DEPS ...): a stage library whose PUBLIC
# include dir is include/ and PRIVATE include dir is its own src/<stage>/, so a
# stage cannot reach into another stage's private headers. -Werror=switch (always, not
# only with QBC_WERROR): a switch over an enum without `default:` must name every
# enumerator, so a new op (ir/ops.def) fails to build until every evaluator handles it.
function(qbc_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter -Werror=switch)
  if(QBC_WERROR)
    target_compile_options(${name} PRIVATE -Werror)
  endif()
endfunction()

# qbc_add_interface_library(NAME DEPS ...): a header-only stage library (no sources). Its
# INTERFACE include dir is include/ and its DEPS are INTERFACE link dependencies, so linking
# it gives a target the stage's headers and what they include.
function(qbc_add_interface_library name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  add_library(${name} INTERFACE)
  target_include_directories(${name} INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
  target_link_libraries(${name} INTERFACE ${ARG_DEPS})
endfunction()

# qbc_use_torch(TARGET): links LibTorch and precompiles its heavy headers for
# TARGET. Only targets whose .cpp files compute with tensors call this.
function(qbc_use_torch target)
  target_link_libraries(${target} PRIVATE qbc_torch)
  target_precompile_headers(${target} PRIVATE <torch/torch.h>)
endfunction()

# qbc_add_gtest(NAME SOURCES ... DEPS ...): a GoogleTest binary registered with ctest.
function(qbc_add_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} qbc_test_support GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
endfunction()

# qbc_embed_files(OUT_CPP SYMBOL FILES...): generates a .cpp that defines
# `qbc::embedded::SYMBOL()` returning {relative path, contents} for each file,
# so presets and target profiles are built into the binary.
function(qbc_embed_files out_cpp symbol)
  set(files ${ARGN})
  string(REPLACE ";" "@" files_arg "${files}")
  add_custom_command(
    OUTPUT ${out_cpp}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out_cpp} -DSYMBOL=${symbol} -DROOT=${PROJECT_SOURCE_DIR}
            "-DFILES=${files_arg}" -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake
    DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake
    COMMENT "Embedding ${symbol}" VERBATIM)
endfunction()
