#pragma once
// The admin program on a MySQL / MariaDB table. The store is made without its first-use check
// so that `schema check` and `schema migrate` report on the table as it is; every other
// command checks it first.

#include <memory>
#include <string>

#include <fmt/format.h>
#include <idem/mysql.hpp>

#include "record_text.hpp"
#include "target.hpp"

namespace idem_admin {

class MysqlTarget final : public StoreTarget<idem::mysql::Store> {
 public:
  MysqlTarget(const idem::mysql::ConnectionParams& connection, const std::string& table)
      : where_(where(connection)),
        database_(connection.database.empty() ? "of the option file" : connection.database),
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
    if (done.algorithm.empty()) return fmt::format("{} is up to date: nothing to do", table_);
    std::string changes;
    for (const std::string& c : done.added)
      changes += (changes.empty() ? "added " : ", ") + c;
    if (done.stamped) changes += changes.empty() ? "stamped its layout" : " and stamped its layout";
    return fmt::format("{}: {} ({}); {}", table_, changes, done.algorithm,
                       text(idem::mysql::record_table_stamp));
  }

 private:
  idem::mysql::Store& store() override { return store_; }

  static std::string where(const idem::mysql::ConnectionParams& c) {
    std::string at = !c.unix_socket.empty() ? c.unix_socket
                     : !c.host.empty()      ? fmt::format("{}:{}", c.host, c.port)
                                            : "";
    if (c.option_file.empty()) return at;
    const std::string file = fmt::format("option file {} [{}]", c.option_file, c.option_group);
    return at.empty() ? file : fmt::format("{} ({})", at, file);
  }

  std::string where_;
  std::string database_;
  std::string table_;
  idem::mysql::Store store_;
};

}  // namespace idem_admin
