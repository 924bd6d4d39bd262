#pragma once
// The admin program on idem's records in Redis (a server, or a cluster through some of its
// nodes). The prefix and the bucket count must be those of the services' StoreParams: they
// decide where a key's record lies. Redis keeps no table: `schema check` and `schema migrate`
// read and write the buckets' layout stamps; there is no DDL to print.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <idem/redis.hpp>

#include "target.hpp"

namespace idem_admin {

class RedisTarget final : public StoreTarget<idem::redis::Store> {
 public:
  RedisTarget(const idem::redis::ConnectionParams& connection, idem::redis::StoreParams params)
      : pool_(std::make_shared<idem::redis::Pool>(connection, idem::redis::PoolParams{.size = 1})),
        store_(pool_, std::move(params)) {}

  std::string describe() const override {
    const idem::redis::ConnectionParams& c = pool_->params();
    std::string where = !c.cluster_nodes.empty() ? "cluster"
                        : !c.unix_socket.empty() ? c.unix_socket
                                                 : fmt::format("{}:{}", c.host, c.port);
    for (const std::string& node : c.cluster_nodes)
      where += " " + node;
    return fmt::format("Redis {}, prefix {}, {} buckets", where, layout().prefix(),
                       layout().buckets());
  }
  std::string ddl() const override {
    throw Unsupported(fmt::format(
        "{} keeps no table: there is no DDL to print (docs/redis.md, \"Layout\", names its keys)",
        describe()));
  }
  std::string migrate() override {
    const idem::redis::Migration done = store_.ensure_schema();
    mark_checked();
    return fmt::format("{}: stamped {} of {} buckets; layout {}", describe(), done.stamped_buckets,
                       layout().buckets(), done.layout.layout);
  }

  // The record's key, its bucket, the cluster slot of the bucket and the node serving it.
  std::vector<std::pair<std::string, std::string>> locate(const idem::Key& key) override {
    const std::string member = idem::redis::detail::Layout::member(key);
    const std::string record = layout().keys(member).record;
    const std::string node = pool_->acquire()->node_of(record);
    return {{"redis key", record},
            {"bucket", std::to_string(layout().bucket(member))},
            {"slot", std::to_string(idem::redis::detail::key_slot(record))},
            {"node", node}};
  }

 private:
  idem::redis::Store& store() override { return store_; }
  const idem::redis::detail::Layout& layout() const { return store_.ops().layout(); }

  std::shared_ptr<idem::redis::Pool> pool_;
  idem::redis::Store store_;
};

}  // namespace idem_admin
