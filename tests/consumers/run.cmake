# Builds and runs one consumer project against idem.
#
#   cmake -DIDEM_SOURCE_DIR=<idem checkout> -DWORK_DIR=<scratch dir> -DMODE=<mode>
#         [-DPREFIX=<idem installed by MODE=install>]
#         [-DCMAKE_CXX_COMPILER=<c++>] [-DCMAKE_GENERATOR=<generator>] [-DCONFIG=Release]
#         -P tests/consumers/run.cmake
#
# install: configures and installs idem into PREFIX (default WORK_DIR/prefix) and checks that
# the package is relocatable. find_package*: builds the consumer with CMAKE_PREFIX_PATH=PREFIX
# (without -DPREFIX, installs there first, as MODE=install would). add_subdirectory /
# fetchcontent: builds the consumer with -DIDEM_SOURCE_DIR. Then runs the consumer's app.
# find_package_core and find_package_missing run in an environment without the backends'
# libraries (see below); find_package_missing must fail to configure with an install hint.
# WORK_DIR is wiped first.
cmake_minimum_required(VERSION 3.25)

foreach(var IDEM_SOURCE_DIR WORK_DIR MODE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()
set(modes install find_package find_package_core find_package_missing add_subdirectory fetchcontent)
if(NOT MODE IN_LIST modes)
  message(FATAL_ERROR "run.cmake: MODE must be one of ${modes}, got '${MODE}'")
endif()
get_filename_component(IDEM_SOURCE_DIR "${IDEM_SOURCE_DIR}" ABSOLUTE)
get_filename_component(WORK_DIR "${WORK_DIR}" ABSOLUTE)
if(NOT EXISTS "${IDEM_SOURCE_DIR}/CMakeLists.txt")
  message(FATAL_ERROR "run.cmake: no CMakeLists.txt in IDEM_SOURCE_DIR=${IDEM_SOURCE_DIR}")
endif()
if(NOT DEFINED CONFIG)
  set(CONFIG Release)
endif()
if(PREFIX)
  get_filename_component(prefix "${PREFIX}" ABSOLUTE)
else()
  set(prefix "${WORK_DIR}/prefix")
endif()

set(consumer_dir "${CMAKE_CURRENT_LIST_DIR}/${MODE}")
set(idem_build "${WORK_DIR}/idem-build")
set(consumer_build "${WORK_DIR}/consumer-build")

# Flags every inner configure gets: same compiler and generator as the caller, if given.
set(common_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
if(CMAKE_CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}")
endif()
if(CMAKE_GENERATOR)
  list(APPEND common_args -G "${CMAKE_GENERATOR}")
endif()

# run(<step name> <command...>): runs the command, fails with its output if it fails.
function(run step)
  list(JOIN ARGN " " cmdline)
  message(STATUS "[${MODE}] ${step}: ${cmdline}")
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "[${MODE}] ${step} failed (${rc}):\n  ${cmdline}\n${out}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

if(MODE STREQUAL "install" OR (MODE MATCHES "^find_package" AND NOT PREFIX))
  run("configure idem" ${CMAKE_COMMAND} -S "${IDEM_SOURCE_DIR}" -B "${idem_build}" ${common_args}
      -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_BUILD_BENCH=OFF -DIDEM_INSTALL=ON)
  run("build idem" ${CMAKE_COMMAND} --build "${idem_build}" --config ${CONFIG})
  run("install idem" ${CMAKE_COMMAND} --install "${idem_build}" --config ${CONFIG} --prefix "${prefix}")

  # The installed package must be relocatable: nothing in it may point back at the source or
  # build tree.
  file(GLOB_RECURSE config_files "${prefix}/*.cmake")
  if(NOT config_files)
    message(FATAL_ERROR "[${MODE}] install put no *.cmake package files under ${prefix}")
  endif()
  foreach(f IN LISTS config_files)
    file(READ "${f}" text)
    foreach(tree "${IDEM_SOURCE_DIR}" "${idem_build}")
      string(FIND "${text}" "${tree}" at)
      if(NOT at EQUAL -1)
        message(FATAL_ERROR "[${MODE}] installed ${f} refers to ${tree}")
      endif()
    endforeach()
  endforeach()
  # The core must load without the backends' libraries: its export file may not name them.
  list(FILTER config_files INCLUDE REGEX "/idemTargets\\.cmake$")
  if(NOT config_files)
    message(FATAL_ERROR "[${MODE}] install put no idemTargets.cmake under ${prefix}")
  endif()
  file(READ "${config_files}" text)
  if(text MATCHES "MYSQLCLIENT|SQLite")
    message(FATAL_ERROR "[${MODE}] ${config_files} names a backend's library (${CMAKE_MATCH_0})")
  endif()
endif()
if(MODE STREQUAL "install")
  message(STATUS "[${MODE}] OK: idem installed in ${prefix}")
  return()
endif()

if(MODE MATCHES "^find_package")
  set(consumer_args "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
else()
  set(consumer_args "-DIDEM_SOURCE_DIR=${IDEM_SOURCE_DIR}")
endif()

if(MODE MATCHES "^find_package_(core|missing)$")
  # A machine without the backends' libraries: pkg-config finds none of mysqlclient, hiredis
  # and libpq (empty search path) and find_package(SQLite3), find_package(Boost) and
  # find_package(rabbitmq-c) fail. The core consumer checks
  # that they really fail.
  file(MAKE_DIRECTORY "${WORK_DIR}/no-pkgconfig")
  set(ENV{PKG_CONFIG_LIBDIR} "${WORK_DIR}/no-pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "")
  list(APPEND consumer_args -DCMAKE_DISABLE_FIND_PACKAGE_SQLite3=TRUE
    -DCMAKE_DISABLE_FIND_PACKAGE_Boost=TRUE -DCMAKE_DISABLE_FIND_PACKAGE_rabbitmq-c=TRUE)
endif()

if(MODE STREQUAL "find_package_missing")
  # Every backend is required there; the error must say what to install for each.
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${consumer_dir}" -B "${consumer_build}" ${common_args}
      ${consumer_args}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(rc STREQUAL "0")
    message(FATAL_ERROR "[${MODE}] configure succeeded although the backends are missing:\n${out}")
  endif()
  foreach(hint "default-libmysqlclient-dev" "pkg-config" "libsqlite3-dev" "libhiredis-dev"
               "libboost1.81-dev" "librabbitmq-dev" "libpq-dev")
    string(FIND "${out}" "${hint}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "[${MODE}] the configure error does not name ${hint}:\n${out}")
    endif()
  endforeach()
  message(STATUS "[${MODE}] configure failed as it must:\n${out}")
  message(STATUS "[${MODE}] OK")
  return()
endif()

run("configure consumer" ${CMAKE_COMMAND} -S "${consumer_dir}" -B "${consumer_build}" ${common_args}
    ${consumer_args})

if(MODE MATCHES "^find_package")
  # Make sure the package came from our prefix, not from some idem installed on the system.
  file(STRINGS "${consumer_build}/CMakeCache.txt" idem_dir_line REGEX "^idem_DIR:")
  string(REGEX REPLACE "^idem_DIR:[A-Z]*=" "" found_idem_dir "${idem_dir_line}")
  file(REAL_PATH "${found_idem_dir}" found_idem_dir)
  file(REAL_PATH "${prefix}" real_prefix)
  string(FIND "${found_idem_dir}" "${real_prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "[${MODE}] found idem in '${found_idem_dir}', not under ${real_prefix}")
  endif()
endif()

run("build consumer" ${CMAKE_COMMAND} --build "${consumer_build}" --config ${CONFIG})

# Single-config generators put app in the build dir; multi-config ones in <build>/<config>.
set(app "")
foreach(candidate "${consumer_build}/app" "${consumer_build}/${CONFIG}/app"
                  "${consumer_build}/app.exe" "${consumer_build}/${CONFIG}/app.exe")
  if(EXISTS "${candidate}")
    set(app "${candidate}")
    break()
  endif()
endforeach()
if(NOT app)
  message(FATAL_ERROR "[${MODE}] build succeeded but no app executable in ${consumer_build}")
endif()

run("run app" "${app}")
message(STATUS "[${MODE}] app output:\n${run_output}")
message(STATUS "[${MODE}] OK")
