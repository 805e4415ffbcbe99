# Installing tc for C++ programs that embed it (README.md, "Embedding tc in a C++ program"):
#   cmake --install build --prefix /opt/tc
# puts the static libraries in lib/, the public headers in include/, a CMake package in
# lib/cmake/tc and a pkg-config file in lib/pkgconfig:
#   find_package(tc REQUIRED)  ->  tc::tc (the whole of tc: runtime and compiler, tc/vm/compiler.h),
#                                  tc::vm (the Lua runtime alone, tc/vm/runtime.h),
#                                  tc::aot_runtime (the package loader without Lua, tc/aot.h)
#   pkg-config --cflags --libs tc  (the whole of tc, as tc::tc)
# The dependencies stay where Debian puts them: Lua 5.4 and OpenBLAS by their paths, LLVM 19 by
# its CMake package (static components, as tcrun links them) or, for pkg-config, its shared
# library; nlohmann_json and Threads by their CMake packages.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TC_EXPORTED tc_lua tc_stdlib tc_vm tc_capture tc_backends_runtime tc_backends tc_aot_runtime tc_aot tc_embed)
set(TC_EXPORT_NAMES lua stdlib vm capture backends_runtime backends aot_runtime aot tc)
foreach(target name IN ZIP_LISTS TC_EXPORTED TC_EXPORT_NAMES)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  # Include folders of the source and build trees hold in the build tree only; installed, every
  # public header is under include/.
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT dirs)
    continue()
  endif()
  set(kept "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  foreach(dir IN LISTS dirs)
    cmake_path(IS_PREFIX PROJECT_SOURCE_DIR "${dir}" in_source)
    cmake_path(IS_PREFIX PROJECT_BINARY_DIR "${dir}" in_build)
    if(in_source OR in_build)
      list(APPEND kept "$<BUILD_INTERFACE:${dir}>")
    else()
      list(APPEND kept "${dir}")
    endif()
  endforeach()
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${kept}")
endforeach()
if(TC_ASAN)  # the libraries carry sanitizer calls: whatever links them links the runtimes too
  target_link_options(tc_stdlib INTERFACE -fsanitize=address,undefined)
  set(TC_PC_LINK_OPTIONS "-fsanitize=address,undefined")
endif()

install(TARGETS ${TC_EXPORTED} EXPORT tcTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(dir stdlib/include vm/include capture/include backends/include backends/cpu/include aot/include)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
set(TC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tc)
install(EXPORT tcTargets NAMESPACE tc:: DESTINATION ${TC_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tcConfig.cmake.in ${PROJECT_BINARY_DIR}/tcConfig.cmake
                              INSTALL_DESTINATION ${TC_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tcConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tcConfig.cmake ${PROJECT_BINARY_DIR}/tcConfigVersion.cmake DESTINATION ${TC_CMAKE_DIR})

if(TC_HAVE_CUDA)
  set(TC_PC_DEFINES "-DTC_HAVE_CUDA=1")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/tc.pc.in ${PROJECT_BINARY_DIR}/tc.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tc.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
