# Included by idem's tests/CMakeLists.txt: one CTest test per way of consuming idem
# (find_package of an install, add_subdirectory, FetchContent). Each builds a tiny project
# under tests/consumers/<mode>/ out of process via run.cmake and runs it.
set(_idem_consumer_run "${CMAKE_CURRENT_LIST_DIR}/run.cmake")
foreach(_idem_consumer_mode IN ITEMS find_package add_subdirectory fetchcontent)
  add_test(NAME consumer.${_idem_consumer_mode}
    COMMAND ${CMAKE_COMMAND}
      -DIDEM_SOURCE_DIR=${PROJECT_SOURCE_DIR}
      -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumers/${_idem_consumer_mode}
      -DMODE=${_idem_consumer_mode}
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DCMAKE_GENERATOR=${CMAKE_GENERATOR}
      -P ${_idem_consumer_run})
  set_tests_properties(consumer.${_idem_consumer_mode} PROPERTIES LABELS "consumer" TIMEOUT 600)
endforeach()
unset(_idem_consumer_mode)
unset(_idem_consumer_run)
