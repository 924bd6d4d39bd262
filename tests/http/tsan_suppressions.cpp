// Linked into the HTTP server tests and the example server in ThreadSanitizer builds only.
// Debian's cpp-httplib is a shared library built without -fsanitize=thread: TSAN cannot see the
// synchronisation inside it and reports races within it (its thread pool, its std::regex use).
// Races with a frame in that library are suppressed, which also hides the server's own handler
// frames (they run below httplib's); the idem flow is checked under TSAN without httplib by
// handle_test.cpp, which races real threads in-process.
extern "C" const char* __tsan_default_suppressions() {
  return "race:libcpp-httplib.so\n";
}
