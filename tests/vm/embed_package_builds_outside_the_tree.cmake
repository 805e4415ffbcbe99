# ctest vm_embed_package_builds_outside_the_tree: the installed package (cmake/install.cmake) serves
# a program outside the tree. `cmake --install` into a scratch prefix, then scripts/embed_example.cpp
# built twice against it, by a separate CMake project with find_package(tc) and tc::tc and by one
# compile line with pkg-config, and each run: the example checks its results and that tc.compile
# really compiled (tc.compiler.stats().backend_compiles > 0), exiting 1 otherwise.
# Variables: BUILD_DIR, SOURCE_DIR, WORK (a scratch folder, emptied), GENERATOR, CXX.
file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
set(ENV{TC_CACHE_DIR} ${WORK}/cache)  # generated code for real, not from the user's cache
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

file(WRITE ${WORK}/app/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)
project(embed_app CXX)
find_package(tc 0.1 REQUIRED)
add_executable(embed_example ${SOURCE_DIR}/scripts/embed_example.cpp)
target_link_libraries(embed_example PRIVATE tc::tc)
")
run("configure with find_package(tc)" ${CMAKE_COMMAND} -S ${WORK}/app -B ${WORK}/app/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix})
run("build with find_package(tc)" ${CMAKE_COMMAND} --build ${WORK}/app/build)
run("the find_package(tc) build of embed_example" ${WORK}/app/build/embed_example)
message(STATUS "find_package(tc):\n${out}")

set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
run("pkg-config" pkg-config --cflags --libs tc)
separate_arguments(flags UNIX_COMMAND "${out}")
run("compile with pkg-config" ${CXX} -std=c++20 ${SOURCE_DIR}/scripts/embed_example.cpp ${flags} -o ${WORK}/embed_pc)
run("the pkg-config build of embed_example" ${WORK}/embed_pc)
message(STATUS "pkg-config:\n${out}")
