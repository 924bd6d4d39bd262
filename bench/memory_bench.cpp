// memory.cycle: run_once on MemoryStore against a std::mutex + std::unordered_map.
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <idem/idem.hpp>

#include "common.hpp"
#include "scenarios.hpp"

namespace bench {
namespace {

// What a hand-written in-process dedup table would keep per request.
struct RawRecord {
  int status = 0;  // 0 processing, 1 succeeded
  std::string fingerprint;
  std::string snapshot;
  idem::TimePoint created_at{};
  idem::TimePoint updated_at{};
  idem::TimePoint expire_at{};
};

struct RawTable {
  std::mutex mutex;
  std::unordered_map<std::string, RawRecord> records;
};

void memory_cycle(const Config& config, int threads) {
  const std::size_t ops = config.ops(400'000, 100'000);
  const std::size_t per_thread = ops / static_cast<std::size_t>(threads);
  const std::size_t total = per_thread * static_cast<std::size_t>(threads);
  const idem::Options options{};

  std::unique_ptr<idem::MemoryStore> store;
  Side library{[&](int) { store = std::make_unique<idem::MemoryStore>(); },
               [&](int t, int r) {
                 for (std::size_t i = 0; i < per_thread; ++i) {
                   const idem::Key key{"BENCH", key_id(r, t, i)};
                   auto out = idem::run_once(
                       *store, key, fixed_fingerprint(),
                       [] {
                         return nlohmann::json{{"status", "paid"}};
                       },
                       options);
                   if (out.verdict() != idem::Verdict::acquired)
                     throw std::runtime_error("not acquired");
                 }
               }};

  std::unique_ptr<RawTable> table;
  Side baseline{[&](int) { table = std::make_unique<RawTable>(); },
                [&](int t, int r) {
                  for (std::size_t i = 0; i < per_thread; ++i) {
                    const std::string key = "BENCH:" + key_id(r, t, i);
                    const auto now = idem::system_now();
                    {
                      std::lock_guard lock(table->mutex);
                      auto [it, inserted] = table->records.try_emplace(
                          key, RawRecord{0, fixed_fingerprint(), {}, now, now, now + options.ttl});
                      if (!inserted) throw std::runtime_error("duplicate key");
                    }
                    std::string snapshot = nlohmann::json{{"status", "paid"}}.dump();
                    const auto done = idem::system_now();
                    std::lock_guard lock(table->mutex);
                    RawRecord& rec = table->records.at(key);
                    rec.status = 1;
                    rec.snapshot = std::move(snapshot);
                    rec.updated_at = done;
                  }
                }};

  const auto t = alternate(fmt::format("memory.cycle/{}", threads), config.rounds_per_side(),
                           threads, total, library, baseline);
  auto j = throughput_json("memory.cycle", threads, total, t, ">= 0.5");
  j["library"] = "run_once on idem::MemoryStore (claim, no-op, commit of a small JSON)";
  j["baseline"] = "std::mutex + std::unordered_map: insert, then update of the same record";
  emit(j);
  store.reset();
  table.reset();
}

}  // namespace

int run_memory(const Config& config, const Selected& selected) {
  if (!selected("memory.cycle")) return 0;
  return attempt("memory.cycle", [&] {
    memory_cycle(config, 1);
    memory_cycle(config, 2);
  });
}

}  // namespace bench
