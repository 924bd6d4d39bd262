#pragma once
// A PostgreSQL server of one test's own (scripts/postgres in a temporary directory), for tests
// that kill, restart, replicate or promote a server: the shared server of the suite is never
// touched. Stopped, and its data deleted, when the test ends, also when it fails.
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "paths.hpp"
#include "run_program.hpp"

namespace idem_test {

struct PrivatePgServer {
  std::string dir;
  std::string socket_dir;

  // A fresh server.
  explicit PrivatePgServer(const std::string& stem) : dir(dir_for(stem)) {
    started(script("start"), "start");
  }
  // A streaming standby of `primary`: mode "sync" (the primary's commits wait for it) or
  // "async".
  PrivatePgServer(const std::string& stem, const PrivatePgServer& primary, const std::string& mode)
      : dir(dir_for(stem)) {
    started(script(std::vector<std::string>{"replica", primary.dir, mode}), "replica");
  }
  ~PrivatePgServer() {
    (void)script("stop");  // deletes the server's data; the directory that named it goes too
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  PrivatePgServer(const PrivatePgServer&) = delete;
  PrivatePgServer& operator=(const PrivatePgServer&) = delete;

  // scripts/postgres COMMAND DIR [ARGS...]
  ProgramRun script(std::vector<std::string> command) const {
    std::vector<std::string> argv{std::string(paths::source_dir) + "/scripts/postgres",
                                  command.front(), dir};
    argv.insert(argv.end(), command.begin() + 1, command.end());
    return run_program(argv);
  }
  ProgramRun script(const std::string& command) const {
    return script(std::vector<std::string>{command});
  }
  std::string conninfo() const { return "host=" + socket_dir + " user=idem dbname=idem"; }

 private:
  static std::string dir_for(const std::string& stem) {
    return (std::filesystem::temp_directory_path() /
            ("idem-pg-" + stem + "-" + std::to_string(::getpid())))
        .string();
  }
  void started(const ProgramRun& run, const std::string& what) {
    if (run.status != 0)
      throw std::runtime_error("scripts/postgres " + what + " failed: " + run.err);
    socket_dir = run.out.substr(0, run.out.find('\n'));
  }
};

}  // namespace idem_test
