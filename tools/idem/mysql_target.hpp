#pragma once
// The admin program on a MySQL / MariaDB table. The store is made without its first-use check
// so that `schema check` and `schema migrate` report on the table as it is; every other
// command checks it first.

#include <memory>
#include <string>

#include <fmt/format.h>
#include <idem/mysql.hpp>

#include "target.hpp"

namespace idem_admin {

class MysqlTarget final : public Target {
 public:
  MysqlTarget(const idem::mysql::ConnectionParams& connection, const std::string& table)
      : where_(connection.unix_socket.empty()
                   ? fmt::format("{}:{}", connection.host, connection.port)
                   : connection.unix_socket),
        database_(connection.database),
        table_(table),
        store_(std::make_shared<idem::mysql::Pool>(connection, idem::mysql::PoolParams{.size = 1}),
               {.table = table, .check_table = false}) {}

  std::string describe() const override {
    return fmt::format("MySQL {}, database {}, table {}", where_, database_, table_);
  }
  std::optional<idem::Record> find(const idem::Key& key) override {
    checked();
    return store_.find(key);
  }
  std::vector<idem::Record> list(const idem::RecordQuery& query) override {
    checked();
    return store_.list(query);
  }
  idem::Record repair(const idem::Key& key, const idem::Repair& repair) override {
    checked();
    return store_.repair(key, repair);
  }
  std::size_t purge(std::size_t batch, std::size_t max_batches) override {
    checked();
    return store_.purge_expired(batch, max_batches);
  }
  void check_schema() override { store_.check_schema(); }
  std::string ddl() const override {
    return idem::mysql::record_table_ddl(idem::detail::quote_parts(
        idem::detail::split_identifier(table_, "idem", "table name", true), '`'));
  }
  std::string migrate() override {
    const idem::mysql::Migration done = store_.ensure_schema();
    checked_ = true;
    if (done.added.empty()) return fmt::format("{} is up to date: nothing to do", table_);
    std::string columns;
    for (const std::string& c : done.added)
      columns += (columns.empty() ? "" : ", ") + c;
    return fmt::format("{}: added {} ({})", table_, columns, done.algorithm);
  }

 private:
  void checked() {
    if (!checked_) store_.check_schema();
    checked_ = true;
  }

  std::string where_;
  std::string database_;
  std::string table_;
  idem::mysql::Store store_;
  bool checked_ = false;
};

}  // namespace idem_admin
