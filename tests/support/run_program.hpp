#pragma once
// Runs a program to its end from a test and returns what it printed and its exit code: the
// suites that drive a command-line tool (tools/idem, promtool) do it this one way.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "temp_dir.hpp"

namespace idem_test {

struct ProgramRun {
  int status = -1;  // the exit code; -1 when a signal ended it
  std::string out;
  std::string err;
};

// argv[0] is the program; no argument is interpreted by a shell.
inline ProgramRun run_program(const std::vector<std::string>& argv) {
  const auto quoted = [](const std::string& arg) {
    std::string q = "'";
    for (char c : arg)
      q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  TempDir dir;
  const auto err = dir.path() / "stderr";
  std::string command;
  for (const auto& a : argv)
    command += (command.empty() ? "" : " ") + quoted(a);
  command += " 2>" + quoted(err.string());
  ProgramRun r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr)
    r.out += buffer.data();
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  std::ostringstream text;
  text << in.rdbuf();
  r.err = text.str();
  return r;
}

}  // namespace idem_test
