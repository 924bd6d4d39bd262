// Result cells without a server: DATETIME conversions (MYSQL_TIME and the server's text),
// the row layer's typing of text-protocol values, and the decoding of record rows.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "idem/errors.hpp"
#include "idem/mysql/detail/datetime.hpp"
#include "idem/mysql/detail/record_sql.hpp"
#include "idem/mysql/row.hpp"

using idem::TimePoint;
using idem::mysql::Cell;
using idem::mysql::Row;
using namespace std::chrono_literals;
namespace d = idem::mysql::detail;

namespace {

TimePoint at(int y, unsigned m, unsigned day, std::chrono::milliseconds tod = {}) {
  return TimePoint{std::chrono::sys_days{std::chrono::year{y} / m / day}} + tod;
}

d::ColumnType datetime(unsigned char digits) {
  return {Cell::Kind::time, false, digits};
}

}  // namespace

TEST_CASE("a time goes to MYSQL_TIME and back unchanged") {
  for (const TimePoint t :
       {at(2026, 12, 1, 1h + 2min + 3s + 4ms), at(1970, 1, 1), TimePoint{} - 1ms, at(1000, 1, 1),
        at(9999, 12, 31, 23h + 59min + 59s + 999ms), at(2024, 2, 29, 12h)}) {
    const MYSQL_TIME m = d::to_mysql_time(t);
    CHECK(m.time_type == MYSQL_TIMESTAMP_DATETIME);
    CHECK(d::from_mysql_time(m) == d::Micros{t});
    const auto text = d::datetime_text(m, 3);
    const auto parsed = d::parse_datetime(text);
    REQUIRE(parsed.has_value());
    CHECK(d::from_mysql_time(*parsed) == d::Micros{t});
  }
  const MYSQL_TIME m = d::to_mysql_time(at(2026, 12, 1, 23h + 59min + 59s + 999ms));
  CHECK(m.hour == 23);
  CHECK(m.second == 59);
  CHECK(m.second_part == 999'000);
  CHECK(d::datetime_text(m, 3) == "2026-12-01 23:59:59.999");
  CHECK(d::datetime_text(m, 0) == "2026-12-01 23:59:59");
  CHECK(d::datetime_text(m, 6) == "2026-12-01 23:59:59.999000");
}

TEST_CASE("a MYSQL_TIME that names no instant converts to nothing") {
  MYSQL_TIME zero{};
  zero.time_type = MYSQL_TIMESTAMP_DATETIME;  // 0000-00-00 00:00:00
  CHECK_FALSE(d::from_mysql_time(zero).has_value());
  MYSQL_TIME m = d::to_mysql_time(at(2026, 2, 28));
  m.day = 30;  // February 30th
  CHECK_FALSE(d::from_mysql_time(m).has_value());
  m = d::to_mysql_time(at(2026, 2, 28));
  m.hour = 24;
  CHECK_FALSE(d::from_mysql_time(m).has_value());
  m = d::to_mysql_time(at(2026, 2, 28));
  m.time_type = MYSQL_TIMESTAMP_TIME;
  CHECK_FALSE(d::from_mysql_time(m).has_value());
  // A zero date stays text, as the server wrote it.
  const Cell c = d::time_cell(zero, 0);
  CHECK(c.kind() == Cell::Kind::text);
  CHECK(c == "0000-00-00 00:00:00");
}

TEST_CASE("the server's DATETIME text parses to the microsecond, or not at all") {
  auto micros = [](std::string_view text) -> std::optional<d::Micros> {
    const auto m = d::parse_datetime(text);
    return m ? d::from_mysql_time(*m) : std::nullopt;
  };
  CHECK(micros("2026-12-01 01:02:03") == d::Micros{at(2026, 12, 1, 1h + 2min + 3s)});
  CHECK(micros("2026-12-01 01:02:03.5") == d::Micros{at(2026, 12, 1, 1h + 2min + 3s + 500ms)});
  CHECK(micros("2026-12-01 01:02:03.000500") == d::Micros{at(2026, 12, 1, 1h + 2min + 3s)} + 500us);
  for (const char* bad : {"", "2026-12-01", "2026-12-01 01:02:03.", "2026-12-01 01:02:03.1234567",
                          "2026/12/01 01:02:03", "2026-12-01T01:02:03", "2026-12-01 01:02:0x",
                          "2026-13-01 01:02:03", "2026-12-01 01:02:03 ", "0000-00-00 00:00:00"})
    CHECK_FALSE(micros(bad).has_value());
}

TEST_CASE("text-protocol values are typed by their column, once") {
  const Cell t = d::text_cell(datetime(3), "2026-12-01 01:02:03.004");
  CHECK(t.kind() == Cell::Kind::time);
  CHECK(t.time() == at(2026, 12, 1, 1h + 2min + 3s + 4ms));
  CHECK(t == "2026-12-01 01:02:03.004");
  // Milliseconds round down; to_text() keeps the column's microseconds.
  const Cell six = d::text_cell(datetime(6), "1969-12-31 23:59:59.999999");
  CHECK(six.time() == TimePoint{} - 1ms);
  CHECK(six.to_text() == "1969-12-31 23:59:59.999999");
  CHECK(d::text_cell(datetime(0), "not a time").text() == "not a time");

  const Cell n = d::text_cell({Cell::Kind::integer, false, 0}, "-42");
  CHECK(n.integer() == -42);
  CHECK(n.integer<unsigned>() == std::nullopt);  // does not fit
  CHECK(n == "-42");
  const Cell big = d::text_cell({Cell::Kind::integer, true, 0}, "18446744073709551615");
  CHECK(big.integer<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max());
  CHECK(big.integer() == std::nullopt);
  CHECK(big.to_text() == "18446744073709551615");
  CHECK(d::text_cell({}, "42").text() == "42");  // a text column stays text
  CHECK(Cell{}.is_null());
  CHECK(Cell{}.to_text() == std::nullopt);
  CHECK_FALSE(Cell{} == "");
}

namespace {

Row record_row() {
  const auto when = [](std::chrono::milliseconds tod) {
    return Cell::from_time(d::Micros{at(2026, 12, 1, tod)}, 3);
  };
  return {Cell::from_text("order-1"),
          Cell::from_text("PAY"),
          Cell::from_int64(1),
          Cell::from_uint64(7),
          Cell::from_text("token"),
          Cell::from_text("fp"),
          Cell{},
          Cell::from_int64(0),
          Cell::from_uint64(2),
          when(10s),
          when(1s),
          when(2s),
          when(1h),
          Cell{},  // recovery_points
          Cell{},  // repair_reason
          Cell{},  // repaired_at
          when(3s)};
}

}  // namespace

TEST_CASE("decode_record reads typed cells") {
  const auto read = d::decode_record(record_row());
  CHECK(read.record.key.id() == "order-1");
  CHECK(read.record.key.biz_type() == "PAY");
  CHECK(read.record.status == idem::Status::succeeded);
  CHECK(read.record.ticket.fence == 7);
  CHECK(read.record.ticket.owner == "token");
  CHECK(read.record.fingerprint == "fp");
  CHECK(read.record.snapshot.empty());  // NULL
  CHECK_FALSE(read.record.retryable);
  CHECK(read.record.attempts == 2);
  CHECK(read.record.lease_until == at(2026, 12, 1, 10s));
  CHECK(read.record.created_at == at(2026, 12, 1, 1s));
  CHECK(read.record.updated_at == at(2026, 12, 1, 2s));
  CHECK(read.record.expire_at == at(2026, 12, 1, 1h));
  CHECK(read.record.recovery_points.empty());  // NULL: no step finished
  CHECK(read.record.repair_reason.empty());
  CHECK_FALSE(read.record.repaired_at.has_value());
  CHECK(read.now == at(2026, 12, 1, 3s));
}

TEST_CASE("decode_record reads every status, recovery points and the last repair") {
  for (int status = 0; status <= 3; ++status) {
    Row row = record_row();
    row[d::column::status] = Cell::from_int64(status);
    CHECK(static_cast<int>(d::decode_record(row).record.status) == status);
  }
  Row row = record_row();
  row[d::column::status] = Cell::from_int64(3);
  row[d::column::recovery_points] = Cell::from_text(R"({"reserve":{"hold":"h-1"},"charge":7})");
  row[d::column::repair_reason] = Cell::from_text("gateway shows ch_1 (caf\xc3\xa9)");
  row[d::column::repaired_at] = Cell::from_time(d::Micros{at(2026, 12, 1, 5s)}, 3);
  const auto read = d::decode_record(row);
  CHECK(read.record.status == idem::Status::outcome_unknown);
  CHECK(read.record.recovery_points == R"({"reserve":{"hold":"h-1"},"charge":7})");
  CHECK(read.record.repair_reason == "gateway shows ch_1 (caf\xc3\xa9)");
  CHECK(read.record.repaired_at == at(2026, 12, 1, 5s));
}

TEST_CASE("a status this idem does not know is CorruptRecord, as status 3 was to an older one") {
  // An idem binary from before outcome_unknown knew 0 to 2 and refused anything else as
  // CorruptRecord (never retried: nothing runs). This one knows 0 to 3 and refuses 4 alike.
  Row row = record_row();
  row[d::column::status] = Cell::from_int64(4);
  CHECK_THROWS_AS(d::decode_record(row), idem::CorruptRecord);
  CHECK_THROWS_WITH(d::decode_record(row),
                    Catch::Contains("column status") && Catch::Contains("unknown status 4"));
}

TEST_CASE("decode_record and fresh_record refuse bad or NULL values as CorruptRecord") {
  auto with = [](std::size_t column, Cell c) {
    Row row = record_row();
    row[column] = std::move(c);
    return row;
  };
  CHECK_THROWS_AS(d::decode_record(with(10, Cell{})), idem::CorruptRecord);
  CHECK_THROWS_WITH(d::decode_record(with(10, Cell::from_text("0000-00-00 00:00:00"))),
                    Catch::Contains("created_at") && Catch::Contains("not a DATETIME"));
  CHECK_THROWS_AS(d::decode_record(with(d::column::now, Cell::from_int64(5))), idem::CorruptRecord);
  CHECK_THROWS_WITH(d::decode_record(with(3, Cell{})), Catch::Contains("fence holds NULL"));
  CHECK_THROWS_AS(d::decode_record(with(3, Cell::from_int64(-1))), idem::CorruptRecord);
  CHECK_THROWS_AS(d::decode_record(with(2, Cell::from_text("1"))), idem::CorruptRecord);
  CHECK_THROWS_WITH(d::decode_record(with(2, Cell::from_int64(9))),
                    Catch::Contains("unknown status 9"));
  CHECK_THROWS_AS(d::decode_record(with(4, Cell::from_int64(1))), idem::CorruptRecord);
  CHECK_THROWS_AS(d::decode_record(with(0, Cell::from_text(""))), idem::CorruptRecord);  // key
  CHECK_THROWS_AS(d::decode_record(Row(13)), idem::CorruptRecord);
  CHECK_THROWS_WITH(d::decode_record(Row(14)),  // a layout-1 row with the server's time
                    Catch::Contains("14 columns") && Catch::Contains("migrate_record_table"));
  // The new columns: each bad value names its column.
  CHECK_THROWS_WITH(
      d::decode_record(with(d::column::recovery_points, Cell::from_text("[1, 2]"))),
      Catch::Contains("column recovery_points") && Catch::Contains("not a JSON object"));
  CHECK_THROWS_WITH(d::decode_record(with(d::column::recovery_points, Cell::from_text("{\"a\":"))),
                    Catch::Contains("column recovery_points"));
  CHECK_THROWS_WITH(d::decode_record(with(d::column::recovery_points, Cell::from_int64(1))),
                    Catch::Contains("column recovery_points") && Catch::Contains("not text"));
  CHECK_THROWS_WITH(d::decode_record(with(d::column::repair_reason, Cell::from_int64(1))),
                    Catch::Contains("column repair_reason"));
  CHECK_THROWS_WITH(
      d::decode_record(with(d::column::repaired_at, Cell::from_text("0000-00-00 00:00:00"))),
      Catch::Contains("column repaired_at") && Catch::Contains("not a DATETIME"));
  // A long bad value is shown shortened, not in full.
  const std::string long_array = "[" + std::string(5000, '1') + "]";
  try {
    d::decode_record(with(d::column::recovery_points, Cell::from_text(long_array)));
    FAIL("decoded recovery points that are not an object");
  } catch (const idem::CorruptRecord& e) {
    CHECK(std::string(e.what()).size() < 300);
  }

  const idem::Key key{"PAY", "order-1"};
  const auto t = [](std::chrono::milliseconds tod) {
    return Cell::from_time(d::Micros{at(2026, 12, 1, tod)}, 3);
  };
  const auto fresh = d::fresh_record({t(10s), t(1s), t(1h)}, key, "token", "fp");
  CHECK(fresh.lease_until == at(2026, 12, 1, 10s));
  CHECK(fresh.created_at == at(2026, 12, 1, 1s));
  CHECK(fresh.updated_at == at(2026, 12, 1, 1s));
  CHECK(fresh.expire_at == at(2026, 12, 1, 1h));
  CHECK(fresh.ticket.fence == 1);
  CHECK_THROWS_AS(d::fresh_record({t(10s), Cell{}, t(1h)}, key, "token", "fp"),
                  idem::CorruptRecord);
  CHECK_THROWS_AS(d::fresh_record({t(10s), t(1s)}, key, "token", "fp"), idem::CorruptRecord);
}
