#pragma once
// A server binary (an example server, the fake payment gateway) as a child process whose first
// stdout line names its loopback port ("listening on 127.0.0.1:PORT ..."), for the tests that
// drive it over HTTP.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace idem_test {

// The destructor (also on a failed assertion or an exception) stops the child with SIGTERM,
// then SIGKILL; PR_SET_PDEATHSIG kills it if this process dies first.
class ServerProcess {
 public:
  ServerProcess(std::string binary, std::vector<std::string> args) {
    args.insert(args.begin(), std::move(binary));
    std::vector<char*> argv;
    for (std::string& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    // Close-on-exec, so that no other child (a server started later) inherits this pipe.
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2() failed");
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork() failed");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // the parent died before prctl
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
    try {
      port_ = read_port();
    } catch (...) {
      stop();
      throw;
    }
  }
  ~ServerProcess() { stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }

  // Stops the server; its exit status (0 after a clean SIGTERM), or -1 if it had to be killed.
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    int wstatus = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    pid_t done = 0;
    while ((done = ::waitpid(pid_, &wstatus, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
    if (done == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &wstatus, 0);
      return forget(-1);
    }
    return forget(WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  }

  // Kills the server with SIGKILL at once, as a crash would: no handler runs, nothing is
  // flushed or closed by the server itself. Returns -1.
  int kill() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    return forget(-1);
  }

 private:
  // The child is reaped: remember how it ended, release its pipe.
  int forget(int status) {
    pid_ = 0;
    ::close(out_);
    status_ = status;
    return status_;
  }

  int read_port() {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
    while (line.find('\n') == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) throw std::runtime_error("the server printed no port within 60 s");
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) throw std::runtime_error("the server exited before printing its port: " + line);
      line.append(buf, static_cast<std::size_t>(n));
    }
    const auto colon = line.find("127.0.0.1:");
    if (colon == std::string::npos) throw std::runtime_error("unexpected first line: " + line);
    return std::stoi(line.substr(colon + 10));
  }

  pid_t pid_ = 0;
  int out_ = -1;
  int port_ = 0;
  int status_ = 0;
};

}  // namespace idem_test
