#pragma once
// Child processes for the SQLite tests that need more than one process on a file, or a
// process that dies (SIGKILL) in the middle of something. A child opens its own store after
// fork() and reports through its exit status or the database file, never through Catch2.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

namespace idem_test {

// Runs fn in a child process and returns its pid. The child leaves with _exit(fn()): it never
// returns into Catch2, runs no static destructors, and flushes nothing of the parent's.
template <class F>
pid_t spawn(F&& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 70;
    try {
      code = fn();
    } catch (...) {
      code = 71;
    }
    ::_exit(code);
  }
  return pid;
}

// The exit code of a child, or 128 + the signal that ended it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A pipe. As a start line: children block in wait() until the parent closes its write end.
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_read() {
    if (fds[0] >= 0) ::close(fds[0]);
    fds[0] = -1;
  }
  void close_write() {
    if (fds[1] >= 0) ::close(fds[1]);
    fds[1] = -1;
  }
  // Blocks until a byte arrives or every write end is closed; true for a byte.
  bool wait() {
    char c = 0;
    return ::read(fds[0], &c, 1) == 1;
  }
  void signal() {
    const char c = 'x';
    [[maybe_unused]] const auto n = ::write(fds[1], &c, 1);
  }
};

}  // namespace idem_test
