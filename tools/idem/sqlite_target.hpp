#pragma once
// The admin program on a SQLite file. The file must exist: a mistyped path must not become a
// new, empty database. The store is opened without creating its table, so that only
// `schema migrate` changes the schema.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <idem/sqlite.hpp>

#include "target.hpp"

namespace idem_admin {

class SqliteTarget final : public Target {
 public:
  SqliteTarget(std::filesystem::path file, std::string table)
      : file_(std::move(file)), table_(std::move(table)) {}

  std::string describe() const override {
    return fmt::format("SQLite {}, table {}", file_.string(), table_);
  }
  std::optional<idem::Record> find(const idem::Key& key) override { return checked().find(key); }
  std::vector<idem::Record> list(const idem::RecordQuery& query) override {
    return checked().list(query);
  }
  idem::Record repair(const idem::Key& key, const idem::Repair& repair) override {
    return checked().repair(key, repair);
  }
  std::size_t purge(std::size_t batch, std::size_t max_batches) override {
    return checked().purge_expired(batch, max_batches);
  }
  void check_schema() override { store().check_schema(); }
  // Needs no file.
  std::string ddl() const override {
    return idem::sqlite::record_table_ddl(idem::sqlite::parse_table_name(table_));
  }
  std::string migrate() override {
    store().ensure_schema();
    checked_ = true;
    return fmt::format("{} has every column this idem uses (created or added where missing)",
                       table_);
  }

 private:
  // Opened on first use, without creating the table: only `schema migrate` changes the schema.
  idem::sqlite::Store& store() {
    if (!store_) {
      if (!std::filesystem::is_regular_file(file_)) {
        throw idem::StoreError(fmt::format("no SQLite file at {}", file_.string()), false);
      }
      store_.emplace(file_, idem::sqlite::StoreParams{
                                .table = table_, .create_schema = false, .check_table = false});
    }
    return *store_;
  }
  // Every command but the schema's checks the table first: a table not as idem expects is
  // reported as such, not as a confusing read error.
  idem::sqlite::Store& checked() {
    idem::sqlite::Store& s = store();
    if (!checked_) s.check_schema();
    checked_ = true;
    return s;
  }

  std::filesystem::path file_;
  std::string table_;
  std::optional<idem::sqlite::Store> store_;
  bool checked_ = false;
};

}  // namespace idem_admin
