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

#include "record_text.hpp"
#include "target.hpp"

namespace idem_admin {

class SqliteTarget final : public StoreTarget<idem::sqlite::Store> {
 public:
  SqliteTarget(std::filesystem::path file, std::string table)
      : file_(std::move(file)), table_(std::move(table)) {}

  std::string describe() const override {
    return fmt::format("SQLite {}, table {}", file_.string(), table_);
  }
  // Needs no file.
  std::string ddl() const override {
    return idem::sqlite::record_table_ddl(idem::sqlite::parse_table_name(table_));
  }
  std::string migrate() override {
    store().ensure_schema();
    mark_checked();
    return fmt::format("{} has every column this idem uses (created or added where missing); {}",
                       table_, text(store().check_schema()));
  }

 private:
  // Opened on first use, without creating the table: only `schema migrate` changes the schema.
  idem::sqlite::Store& store() override {
    if (!store_) {
      if (!std::filesystem::is_regular_file(file_)) {
        throw idem::StoreError(fmt::format("no SQLite file at {}", file_.string()), false);
      }
      store_.emplace(file_, idem::sqlite::StoreParams{
                                .table = table_, .create_schema = false, .check_table = false});
    }
    return *store_;
  }

  std::filesystem::path file_;
  std::string table_;
  std::optional<idem::sqlite::Store> store_;
};

}  // namespace idem_admin
