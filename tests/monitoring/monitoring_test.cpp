// monitoring/: the alert rules pass promtool's check and their unit tests, and every query
// of the rules and of the Grafana dashboard names a series that idem::Metrics exports, so a
// renamed series cannot leave a dashboard blank or an alert silent. Each runbook link leads
// to a heading of docs/operations.md.
#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/metrics.hpp>
#include <nlohmann/json.hpp>

#include "../support/paths.hpp"
#include "../support/run_program.hpp"

namespace {

std::string source_file(const std::string& path) {
  std::ifstream in(std::string(idem_test::paths::source_dir) + "/" + path);
  INFO(path);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every series name idem::Metrics renders once each of its series has a value (a histogram
// as its _bucket, _sum and _count).
std::set<std::string> exported_series() {
  idem::Metrics metrics;
  for (int k = 0; k <= static_cast<int>(idem::EventKind::outcome_unknown); ++k) {
    metrics.on_event(idem::Event{static_cast<idem::EventKind>(k), "PAY", "1"});
  }
  metrics.outcome_unknown_records("PAY", 1);
  metrics.janitor().stale_claims(1);
  metrics.janitor().round_ended(std::chrono::system_clock::now());
  std::set<std::string> names;
  std::istringstream lines(metrics.render());
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream fields(line.substr(7));
    std::string name, type;
    fields >> name >> type;
    if (type == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        names.insert(name + suffix);
    } else {
      names.insert(name);
    }
  }
  return names;
}

// The idem_... names in `text`.
std::set<std::string> series_named_in(const std::string& text) {
  static const std::regex name(R"(\bidem_[a-z_]+\b)");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator();
       ++it)
    out.insert(it->str());
  return out;
}

// The rules file without its comments (which name files, not series).
std::string rules_without_comments() {
  std::istringstream lines(source_file("monitoring/idem_alerts.yml"));
  std::string line, out;
  while (std::getline(lines, line)) {
    const auto first = line.find_first_not_of(' ');
    if (first != std::string::npos && line[first] == '#') continue;
    out += line + "\n";
  }
  return out;
}

std::string promtool() {
  const std::string path = idem_test::paths::promtool;
  INFO(
      "promtool was not found when the build was configured: install Debian's prometheus "
      "package (scripts/test does) and configure again");
  REQUIRE_FALSE(path.empty());
  return path;
}

}  // namespace

TEST_CASE("monitoring: promtool checks the alert rules") {
  const auto r = idem_test::run_program(
      {promtool(), "check", "rules",
       std::string(idem_test::paths::source_dir) + "/monitoring/idem_alerts.yml"});
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  CHECK_THAT(r.out + r.err, Catch::Contains("SUCCESS: 9 rules found"));
}

TEST_CASE("monitoring: the alert rules pass their unit tests") {
  const auto r = idem_test::run_program(
      {promtool(), "test", "rules",
       std::string(idem_test::paths::source_dir) + "/monitoring/idem_alerts_test.yml"});
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  CHECK_THAT(r.out + r.err, Catch::Contains("SUCCESS"));
}

TEST_CASE("monitoring: every series the alert rules name is one idem exports") {
  const std::set<std::string> exported = exported_series();
  const std::set<std::string> used = series_named_in(rules_without_comments());
  CHECK(used.size() >= 10);
  for (const std::string& name : used) {
    INFO(name);
    CHECK(exported.count(name) == 1);
  }
}

TEST_CASE("monitoring: every query of the dashboard names series idem exports") {
  const std::set<std::string> exported = exported_series();
  const auto dashboard = nlohmann::json::parse(source_file("monitoring/idem_dashboard.json"));
  std::set<std::string> used;
  int queries = 0;
  for (const auto& panel : dashboard.at("panels")) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel.at("targets")) {
      const std::string expr = target.at("expr").get<std::string>();
      INFO(panel.at("title").get<std::string>() << ": " << expr);
      const std::set<std::string> names = series_named_in(expr);
      CHECK_FALSE(names.empty());
      for (const std::string& name : names) {
        CHECK(exported.count(name) == 1);
        used.insert(name);
      }
      ++queries;
    }
  }
  CHECK(queries >= 15);
  // Each series idem exports is on the dashboard (a histogram through its buckets).
  for (const std::string& name : exported) {
    if (name.ends_with("_sum") || name.ends_with("_count")) continue;
    INFO(name);
    CHECK(used.count(name) == 1);
  }
}

TEST_CASE("monitoring: each alert's runbook is a heading of docs/operations.md") {
  const std::string rules = source_file("monitoring/idem_alerts.yml");
  const std::string operations = source_file("docs/operations.md");
  // The anchors GitHub gives the headings: lower case, spaces as dashes, no punctuation.
  std::set<std::string> anchors;
  std::istringstream lines(operations);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("#", 0) != 0) continue;
    std::string anchor;
    for (char c : line.substr(line.find(' ') + 1)) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
        anchor += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      } else if (c == ' ') {
        anchor += '-';
      }
    }
    anchors.insert(anchor);
  }
  static const std::regex alert(R"(- alert: (\w+))");
  static const std::regex runbook(R"(runbook: docs/operations\.md#([\w-]+))");
  int alerts = 0, runbooks = 0;
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), alert);
       it != std::sregex_iterator(); ++it)
    ++alerts;
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), runbook);
       it != std::sregex_iterator(); ++it) {
    INFO((*it)[1].str());
    CHECK(anchors.count((*it)[1].str()) == 1);
    ++runbooks;
  }
  CHECK(alerts == 9);
  CHECK(runbooks == alerts);
}
