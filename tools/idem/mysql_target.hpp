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

class MysqlTarget final : public StoreTarget<idem::mysql::Store> {
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
  std::string ddl() const override { return idem::mysql::record_table_ddl(store_.table()); }
  std::string migrate() override {
    const idem::mysql::Migration done = store_.ensure_schema();
    mark_checked();
    if (done.added.empty()) return fmt::format("{} is up to date: nothing to do", table_);
    std::string columns;
    for (const std::string& c : done.added)
      columns += (columns.empty() ? "" : ", ") + c;
    return fmt::format("{}: added {} ({})", table_, columns, done.algorithm);
  }

 private:
  idem::mysql::Store& store() override { return store_; }

  std::string where_;
  std::string database_;
  std::string table_;
  idem::mysql::Store store_;
};

}  // namespace idem_admin
