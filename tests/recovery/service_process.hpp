#pragma once
// A program as a child process whose stdout the test reads line by line while it runs (the
// payment service's "ready", "charging T", "answered N" ... lines), and that the test may
// SIGKILL at any moment. stderr stays the test's own, so that the child's errors show up in
// the test's log.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace idem_recovery {

// The destructor (also on a failed assertion or an exception) kills the child with SIGKILL;
// PR_SET_PDEATHSIG kills it if this process dies first.
class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;

  ChildProcess(std::string binary, std::vector<std::string> args) {
    args.insert(args.begin(), std::move(binary));
    std::vector<char*> argv;
    for (std::string& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    // Close-on-exec, so that no other child (the next service run) inherits this pipe.
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2() failed");
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw std::runtime_error("fork() failed");
    }
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // the parent died before prctl
      ::dup2(fds[1], STDOUT_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~ChildProcess() { kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The next whole line (without its '\n'), or nullopt at `deadline` or once the child closed
  // its stdout (eof() then says which).
  std::optional<std::string> next_line(Clock::time_point deadline) {
    for (;;) {
      const auto end = buffer_.find('\n');
      if (end != std::string::npos) {
        std::string line = buffer_.substr(0, end);
        buffer_.erase(0, end + 1);
        return line;
      }
      if (eof_) return std::nullopt;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(out_, chunk, sizeof chunk);
      if (n <= 0) {
        eof_ = true;
      } else {
        buffer_.append(chunk, static_cast<std::size_t>(n));
      }
    }
  }

  bool eof() const noexcept { return eof_; }

  // SIGKILL at once, as a crash: no handler runs, nothing is flushed or closed by the child.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    forget();
  }

  // The exit status once the child ended by itself (after eof()), waiting up to `deadline`;
  // nullopt if it did not end by then (it is killed) or ended by a signal.
  std::optional<int> wait(Clock::time_point deadline) {
    if (pid_ <= 0) return std::nullopt;
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid_, &status, WNOHANG)) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
    if (done == 0) {
      kill();
      return std::nullopt;
    }
    forget();
    if (!WIFEXITED(status)) return std::nullopt;
    return WEXITSTATUS(status);
  }

 private:
  void forget() {
    pid_ = 0;
    if (out_ >= 0) ::close(out_);
    out_ = -1;
  }

  pid_t pid_ = 0;
  int out_ = -1;
  std::string buffer_;
  bool eof_ = false;
};

}  // namespace idem_recovery
