#pragma once
// Where a test program finds the source tree, the programs it starts and its working
// directories. Each program defines the ones it uses in a small file that CMake generates for
// it (idem_test_paths() in tests/CMakeLists.txt): the test files themselves then do not depend
// on where the tree is checked out, and a compiler cache shares their objects between clones.
namespace idem_test::paths {

extern const char* const source_dir;         // the repository's root
extern const char* const admin;              // tools/idem, the operator's program
extern const char* const promtool;           // Prometheus' promtool, or "" when not found
extern const char* const http_server;        // examples/http_server.cpp
extern const char* const http_server_async;  // examples/http_server_async.cpp
extern const char* const fake_gateway;       // tests/recovery/fake_gateway.cpp
extern const char* const payment_service;    // tests/recovery/payment_service.cpp
extern const char* const redis_work_dir;     // where the Redis tests run servers of their own
extern const char* const fault_mariadb_dir;  // the fault suite's own MariaDB server
extern const char* const amqp_consumer;      // examples/amqp_consumer.cpp

}  // namespace idem_test::paths
