# The installable runtime (docs/runtime.md, "Installing the runtime"):
#
#   cmake --install build --component runtime --prefix P
#
# installs qbc_runtime and the static libraries it links (support, runner, isa, mxq and its
# protobuf messages, numerics, tokenizer, image), their public headers (include/qbc/<stage>/ and the
# generated mxq_meta.pb.h under include/qbc/proto/) and the CMake package qbc_runtime, so that
#
#   find_package(qbc_runtime REQUIRED)
#   target_link_libraries(app PRIVATE qbc::runtime)
#
# works from a separate project (examples/generate). The package finds the system libraries
# the static ones need (protobuf, spdlog, fmt, nlohmann_json, PCRE2, xxhash, libpng, libjpeg) as
# this build did.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(QBC_RUNTIME_STAGES support runner isa mxq numerics tokenizer image runtime)
set(QBC_RUNTIME_TARGETS qbc_mxq_proto)
foreach(stage ${QBC_RUNTIME_STAGES})
  list(APPEND QBC_RUNTIME_TARGETS qbc_${stage})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/qbc/${stage}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/qbc COMPONENT runtime)
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/proto/qbc/proto/mxq_meta.pb.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/qbc/proto COMPONENT runtime)

# qbc::runtime for users; the others keep their names (qbc::qbc_support, ...).
set_target_properties(qbc_runtime PROPERTIES EXPORT_NAME runtime)
target_compile_features(qbc_runtime PUBLIC cxx_std_17)
add_library(qbc::runtime ALIAS qbc_runtime)

install(TARGETS ${QBC_RUNTIME_TARGETS} EXPORT qbc_runtime_targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(QBC_RUNTIME_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qbc_runtime)
install(EXPORT qbc_runtime_targets NAMESPACE qbc:: FILE qbc_runtimeTargets.cmake
        DESTINATION ${QBC_RUNTIME_CMAKE_DIR} COMPONENT runtime)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/qbc_runtimeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/qbc_runtimeConfig.cmake INSTALL_DESTINATION ${QBC_RUNTIME_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qbc_runtimeConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qbc_runtimeConfig.cmake
              ${PROJECT_BINARY_DIR}/qbc_runtimeConfigVersion.cmake
        DESTINATION ${QBC_RUNTIME_CMAKE_DIR} COMPONENT runtime)
