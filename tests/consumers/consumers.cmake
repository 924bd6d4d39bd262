# Included by idem's tests/CMakeLists.txt: one CTest test per way of consuming idem
# (find_package of an install, with and without the backends' libraries, add_subdirectory,
# FetchContent). Each builds a tiny project under tests/consumers/<mode>/ out of process via
# run.cmake and runs it. The find_package tests share one install, made by consumer.install.
set(_idem_consumer_run "${CMAKE_CURRENT_LIST_DIR}/run.cmake")
set(_idem_consumer_prefix "${CMAKE_CURRENT_BINARY_DIR}/consumers/install/prefix")
foreach(_idem_consumer_mode IN ITEMS install find_package find_package_core find_package_missing
                                     add_subdirectory fetchcontent)
  add_test(NAME consumer.${_idem_consumer_mode}
    COMMAND ${CMAKE_COMMAND}
      -DIDEM_SOURCE_DIR=${PROJECT_SOURCE_DIR}
      -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumers/${_idem_consumer_mode}
      -DMODE=${_idem_consumer_mode}
      -DPREFIX=${_idem_consumer_prefix}
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DCMAKE_GENERATOR=${CMAKE_GENERATOR}
      -P ${_idem_consumer_run})
  set_tests_properties(consumer.${_idem_consumer_mode} PROPERTIES LABELS "consumer" TIMEOUT 600)
  if(_idem_consumer_mode STREQUAL "install")
    set_tests_properties(consumer.install PROPERTIES FIXTURES_SETUP idem_installed)
  elseif(_idem_consumer_mode MATCHES "^find_package")
    set_tests_properties(consumer.${_idem_consumer_mode} PROPERTIES FIXTURES_REQUIRED idem_installed)
  endif()
endforeach()
unset(_idem_consumer_mode)
unset(_idem_consumer_prefix)
unset(_idem_consumer_run)
