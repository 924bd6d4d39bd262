#pragma once
// The admin program on a PostgreSQL table. The store is made without its first-use check so
// that `schema check` and `schema migrate` report on the table as it is; every other command
// checks it first.

#include <memory>
#include <string>

#include <fmt/format.h>
#include <idem/pg.hpp>

#include "record_text.hpp"
#include "target.hpp"

namespace idem_admin {

class PgTarget final : public StoreTarget<idem::pg::Store> {
 public:
  PgTarget(const idem::pg::ConnectionParams& connection, const std::string& table)
      : table_(table),
        store_(std::make_shared<idem::pg::Pool>(connection, idem::pg::PoolParams{.size = 1}),
               {.table = table, .check_table = false}) {}

  // The connection string is not repeated: it may hold a password.
  std::string describe() const override { return fmt::format("PostgreSQL, table {}", table_); }
  std::string ddl() const override {
    return idem::pg::record_table_ddl(idem::pg::parse_table_name(table_));
  }
  std::string migrate() override {
    const idem::TableLayout layout = store_.ensure_schema();
    mark_checked();
    return fmt::format("{} is as this idem expects (created where missing); {}", table_,
                       text(layout));
  }

 private:
  idem::pg::Store& store() override { return store_; }

  std::string table_;
  idem::pg::Store store_;
};

}  // namespace idem_admin
