// The main of every test program: Catch2's, plus --paths-as-tags, which tags each case with its
// file's path under tests/ ("[#async/guard_test]"). Catch2's own --filenames-as-tags gives only
// the file's name ("[#guard_test]"), so the cases of core/guard_test.cpp and
// async/guard_test.cpp of one program would share a tag, and a suite's CTest tests
// (tests/CMakeLists.txt) would also run, under its label, the other folder's cases.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace {

// "#<folders>/<name>" of a test file ".../tests/<folders>/<name>.cpp" (its path absolute, or
// relative as a compiler cache may rewrite it); "#<name>" of a header's cases
// (idem/testing/conformance.hpp: "#conformance").
std::string path_tag(std::string_view file) {
  std::string path(file);
  for (char& c : path)
    if (c == '\\') c = '/';
  const std::string_view marker = "tests/";
  std::size_t start = 0;
  const bool test_file = path.ends_with(".cpp");
  for (std::size_t at = test_file ? path.rfind(marker) : std::string::npos; at != std::string::npos;
       at = at == 0 ? std::string::npos : path.rfind(marker, at - 1)) {
    if (at == 0 || path[at - 1] == '/') {
      start = at + marker.size();
      break;
    }
  }
  if (start == 0) {
    const std::size_t slash = path.rfind('/');
    start = slash == std::string::npos ? 0 : slash + 1;
  }
  std::string tag = "#" + path.substr(start);
  const std::size_t dot = tag.rfind('.');
  if (dot != std::string::npos) tag.erase(dot);
  return tag;
}

void tag_with_paths(const Catch::IConfig& config) {
  // As Catch2 applies its own file-name tags: before the cases are filtered.
  auto& cases = const_cast<std::vector<Catch::TestCase>&>(Catch::getAllTestCasesSorted(config));
  for (Catch::TestCase& c : cases) {
    std::vector<std::string> tags = c.tags;
    tags.push_back(path_tag(c.lineInfo.file));
    Catch::setTags(c, std::move(tags));
  }
}

}  // namespace

int main(int argc, char* argv[]) {
  std::vector<char*> args;
  bool paths_as_tags = false;
  for (int i = 0; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--paths-as-tags") {
      paths_as_tags = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  Catch::Session session;
  if (const int rc = session.applyCommandLine(static_cast<int>(args.size()), args.data())) {
    return rc;
  }
  if (paths_as_tags) tag_with_paths(session.config());
  return session.run();
}
