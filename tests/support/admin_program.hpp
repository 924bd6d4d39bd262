#pragma once
// Runs tools/idem, the operator's program (its path: paths::admin, set by the test program's
// CMake), from a test: the suites of the program's stores share this one way.
#include <string>
#include <vector>

#include "paths.hpp"
#include "run_program.hpp"

namespace idem_test {

inline ProgramRun run_admin(const std::vector<std::string>& args) {
  std::vector<std::string> argv{paths::admin};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

// Two argument lists one after the other: `where + command`.
inline std::vector<std::string> operator+(std::vector<std::string> a,
                                          const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace idem_test
