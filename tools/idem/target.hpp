#pragma once
// The record table the admin program works on: one interface over idem's stores, so that every
// command is written once. Each operation is the store's own (find, list, repair, purge,
// counts, schema check and migration): the program adds no SQL of its own.

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <idem/key.hpp>
#include <idem/record.hpp>
#include <idem/record_query.hpp>
#include <idem/record_stats.hpp>
#include <idem/repair.hpp>
#include <idem/table_layout.hpp>

namespace idem_admin {

// A command the store cannot do (the schema commands on Redis, which keeps no table): a usage
// error, not a failure of the store.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Target {
 public:
  virtual ~Target() = default;
  // "SQLite /var/lib/pay/idem.db, table idempotent_record", for messages.
  virtual std::string describe() const = 0;
  virtual std::optional<idem::Record> find(const idem::Key& key) = 0;
  virtual std::vector<idem::Record> list(const idem::RecordQuery& query) = 0;
  // Throws idem::RepairRefused when the record no longer carries repair.fence.
  virtual idem::Record repair(const idem::Key& key, const idem::Repair& repair) = 0;
  virtual std::size_t purge(std::size_t batch, std::size_t max_batches) = 0;
  virtual idem::RecordStats stats() = 0;
  // The table's layout; throws idem::SchemaMismatch naming what differs and the fix.
  virtual idem::TableLayout check_schema() = 0;
  // The CREATE TABLE statement of the current layout, for this table.
  virtual std::string ddl() const = 0;
  // Brings a table an older idem created to the current layout (online); says what it did.
  virtual std::string migrate() = 0;
  // Where the store keeps the key's record, beyond the table (Redis: its key, bucket, slot and
  // node), as name/value pairs; empty where the table says it all.
  virtual std::vector<std::pair<std::string, std::string>> locate(const idem::Key&) { return {}; }
};

// A Target over one of idem's stores: each command but the schema's checks the table first,
// once, so that a table not as idem expects is reported as such, not as a confusing read
// error. A backend says how to reach its store and its schema.
template <class S>
class StoreTarget : public Target {
 public:
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
  idem::RecordStats stats() override { return checked().stats(); }
  idem::TableLayout check_schema() override {
    if constexpr (has_schema) {
      return store().check_schema();
    } else {
      throw Unsupported(fmt::format("{} keeps no table schema to check", describe()));
    }
  }

 protected:
  virtual S& store() = 0;
  // After a migration, which checks the table itself.
  void mark_checked() noexcept { checked_ = true; }

 private:
  static constexpr bool has_schema = requires(S & s) { s.check_schema(); };

  S& checked() {
    S& s = store();
    if constexpr (has_schema) {
      if (!checked_) s.check_schema();
    }
    checked_ = true;
    return s;
  }
  bool checked_ = false;
};

}  // namespace idem_admin
