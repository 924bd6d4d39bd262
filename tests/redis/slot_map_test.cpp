// The cluster routing without I/O (idem/redis/detail/slot_map.hpp): a CLUSTER SLOTS reply read
// into the map, MOVED changing one slot, and what an error reply asks the session to do.
#include <string>
#include <string_view>

#include <hiredis/read.h>
#include <catch2/catch.hpp>

#include <idem/redis/detail/slot_map.hpp>

namespace {

using idem::redis::Reply;
using idem::redis::detail::Address;
using idem::redis::detail::Redirect;
using idem::redis::detail::SlotMap;

// The reply a server would send, parsed from its RESP bytes.
Reply parsed(std::string_view resp) {
  redisReader* reader = redisReaderCreate();
  REQUIRE(redisReaderFeed(reader, resp.data(), resp.size()) == REDIS_OK);
  void* r = nullptr;
  REQUIRE(redisReaderGetReply(reader, &r) == REDIS_OK);
  redisReaderFree(reader);
  REQUIRE(r != nullptr);
  return Reply(static_cast<redisReply*>(r));
}

// Slots 0-8191 on 10.0.0.1:7000 (a replica listed after it), 8192-16383 on the node that
// answered (an empty host), as CLUSTER SLOTS answers.
constexpr std::string_view two_masters =
    "*2\r\n"
    "*4\r\n:0\r\n:8191\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
    "*3\r\n$8\r\n10.0.0.9\r\n:7009\r\n$2\r\nid\r\n"
    "*3\r\n:8192\r\n:16383\r\n*3\r\n$0\r\n\r\n:7001\r\n$2\r\nid\r\n";

}  // namespace

TEST_CASE("a slot map read from CLUSTER SLOTS names each slot's master, not its replicas") {
  SlotMap map;
  CHECK(map.empty());
  CHECK_FALSE(map.owner(0));
  map.read(parsed(two_masters), Address{"10.0.0.5", 7001, {}});
  CHECK_FALSE(map.empty());
  CHECK(map.owner(0)->text() == "10.0.0.1:7000");
  CHECK(map.owner(8191)->text() == "10.0.0.1:7000");
  // An empty host is the node that answered.
  CHECK(map.owner(8192)->text() == "10.0.0.5:7001");
  CHECK(map.owner(16383)->text() == "10.0.0.5:7001");
  // Where to ask next time: the masters seen, then the seeds.
  const auto candidates = map.candidates({Address{"10.0.0.7", 7007, {}}});
  REQUIRE(candidates.size() == 3);
  CHECK(candidates[0].text() == "10.0.0.1:7000");
  CHECK(candidates[1].text() == "10.0.0.5:7001");
  CHECK(candidates[2].text() == "10.0.0.7:7007");
}

TEST_CASE("MOVED changes one slot's master - a map read again replaces every slot") {
  SlotMap map;
  map.read(parsed(two_masters), Address{"10.0.0.5", 7001, {}});
  map.moved(42, Address{"10.0.0.5", 7001, {}});
  CHECK(map.owner(42)->text() == "10.0.0.5:7001");
  CHECK(map.owner(41)->text() == "10.0.0.1:7000");
  // A map without slot 42 (its master failed): no owner until the next read.
  map.read(parsed("*1\r\n*3\r\n:0\r\n:41\r\n*2\r\n$8\r\n10.0.0.1\r\n:7000\r\n"),
           Address{"10.0.0.1", 7000, {}});
  CHECK(map.owner(41)->text() == "10.0.0.1:7000");
  CHECK_FALSE(map.owner(42));
  // MOVED into an empty map starts one.
  SlotMap fresh;
  fresh.moved(7, Address{"h", 1, {}});
  CHECK(fresh.owner(7)->text() == "h:1");
  CHECK_FALSE(fresh.owner(8));
}

TEST_CASE("an error reply asks for MOVED, ASK, or nothing") {
  const Address from{"10.0.0.5", 7001, {}};
  const Redirect moved = Redirect::of(parsed("-MOVED 3999 127.0.0.1:6381\r\n"), from);
  CHECK(moved.kind == Redirect::moved);
  CHECK(moved.to.text() == "127.0.0.1:6381");
  const Redirect ask = Redirect::of(parsed("-ASK 3999 ::1:6382\r\n"), from);
  CHECK(ask.kind == Redirect::ask);
  CHECK(ask.to.host == "::1");
  CHECK(ask.to.port == 6382);
  // A node that does not know the name clients reach it by leaves the host out: the host
  // that answered.
  const Redirect unnamed = Redirect::of(parsed("-MOVED 3999 :6380\r\n"), from);
  CHECK(unnamed.kind == Redirect::moved);
  CHECK(unnamed.to.text() == "10.0.0.5:6380");
  CHECK(Redirect::of(parsed("-TRYAGAIN Multiple keys request during rehashing of slot\r\n"), from)
            .kind == Redirect::none);
  CHECK(Redirect::of(parsed("+OK\r\n"), from).kind == Redirect::none);
  CHECK_THROWS_AS(Redirect::of(parsed("-MOVED 3999 nowhere\r\n"), from), idem::InvalidArgument);
}
