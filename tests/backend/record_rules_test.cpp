// The rules of idem/backend/record_rules.hpp, row by row and transition by transition, without
// a store: every store takes its verdicts and values from these functions.

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include <idem/backend/record_rules.hpp>

using namespace std::chrono_literals;
using idem::Status;
using idem::backend::Decision;

namespace {

const idem::TimePoint t0{idem::Duration{1'700'000'000'000}};
const idem::Options opts{.lease = 30s, .ttl = 1h};

idem::Record processing(std::string fp = "fp-A") {
  return idem::backend::claim_record(idem::Key{"PAY", "k1"}, "owner-1", fp, t0, opts);
}

idem::Record with(idem::Record r, idem::Status s, bool retryable = false) {
  r.status = s;
  r.retryable = retryable;
  r.snapshot = s == idem::Status::processing ? "" : R"({"x":1})";
  return r;
}

}  // namespace

TEST_CASE("claim_record: a processing claim with fence 1, the first attempt, times from now") {
  const idem::Record r = processing();
  CHECK(r.status == idem::Status::processing);
  CHECK(r.ticket == idem::Ticket{1, "owner-1"});
  CHECK(r.fingerprint == "fp-A");
  CHECK(r.snapshot.empty());
  CHECK_FALSE(r.retryable);
  CHECK(r.attempts == 1);
  CHECK(r.created_at == t0);
  CHECK(r.updated_at == t0);
  CHECK(r.lease_until == t0 + 30s);
  CHECK(r.expire_at == t0 + 1h);
}

TEST_CASE("decide: each row of the decision table") {
  using idem::Status;
  using idem::backend::Decision;
  const auto live = t0 + 1s;          // inside the lease
  const auto after_lease = t0 + 30s;  // lease_until <= now: the lease ran out
  const auto at_expiry = t0 + 1h;     // expire_at <= now

  SECTION("expired, whatever the status or fingerprint: take_over_expired") {
    for (Status s : {Status::processing, Status::succeeded, Status::failed}) {
      for (bool retryable : {false, true}) {
        const idem::Record r = with(processing(), s, retryable);
        CHECK(idem::backend::decide(r, "fp-A", at_expiry) == Decision::take_over_expired);
        CHECK(idem::backend::decide(r, "fp-OTHER", at_expiry) == Decision::take_over_expired);
      }
    }
  }
  SECTION("a different fingerprint: conflict, before the status is looked at") {
    for (Status s : {Status::processing, Status::succeeded, Status::failed}) {
      CHECK(idem::backend::decide(with(processing(), s, true), "fp-OTHER", live) ==
            Decision::conflict);
      CHECK(idem::backend::decide(with(processing(), s, true), "fp-OTHER", after_lease) ==
            Decision::conflict);
    }
  }
  SECTION("an empty fingerprint on either side is never a conflict") {
    CHECK(idem::backend::decide(with(processing(""), Status::succeeded), "fp-B", live) ==
          Decision::replay);
    CHECK(idem::backend::decide(with(processing(), Status::succeeded), "", live) ==
          Decision::replay);
    CHECK(idem::backend::fingerprints_match("", ""));
    CHECK_FALSE(idem::backend::fingerprints_match("a", "b"));
  }
  SECTION("succeeded: replay, also past the lease") {
    CHECK(idem::backend::decide(with(processing(), Status::succeeded), "fp-A", live) ==
          Decision::replay);
    CHECK(idem::backend::decide(with(processing(), Status::succeeded), "fp-A", after_lease) ==
          Decision::replay);
  }
  SECTION("failed, not retryable: replay (the stored failure)") {
    CHECK(idem::backend::decide(with(processing(), Status::failed, false), "fp-A", live) ==
          Decision::replay);
  }
  SECTION("failed, retryable: take_over_retry, also inside the old lease") {
    CHECK(idem::backend::decide(with(processing(), Status::failed, true), "fp-A", live) ==
          Decision::take_over_retry);
  }
  SECTION("processing inside its lease: in_progress, up to the last millisecond") {
    CHECK(idem::backend::decide(processing(), "fp-A", live) == Decision::in_progress);
    CHECK(idem::backend::decide(processing(), "fp-A", after_lease - 1ms) == Decision::in_progress);
  }
  SECTION("processing past its lease: take_over_stale (the worker died mid-flight)") {
    CHECK(idem::backend::decide(processing(), "fp-A", after_lease) == Decision::take_over_stale);
    CHECK(idem::backend::resumes_crashed(Decision::take_over_stale));
    CHECK_FALSE(idem::backend::resumes_crashed(Decision::take_over_retry));
    CHECK_FALSE(idem::backend::resumes_crashed(Decision::take_over_expired));
  }
  SECTION("outcome_unknown: neither runs nor replays, and never expires") {
    const idem::Record unknown = with(processing(), Status::outcome_unknown);
    CHECK(idem::backend::decide(unknown, "fp-A", live) == Decision::outcome_unknown);
    CHECK(idem::backend::decide(unknown, "fp-A", after_lease) == Decision::outcome_unknown);
    CHECK(idem::backend::decide(unknown, "fp-A", unknown.expire_at + 24h) ==
          Decision::outcome_unknown);
    CHECK_FALSE(idem::backend::is_expired(unknown, unknown.expire_at + 24h));
    CHECK_FALSE(idem::backend::is_stale(unknown, after_lease));
    CHECK(idem::backend::decide(unknown, "fp-B", live) == Decision::conflict);
  }
}

TEST_CASE("verdict_of and is_takeover: what each decision answers") {
  using idem::Verdict;
  using idem::backend::Decision;
  CHECK(idem::backend::verdict_of(Decision::take_over_expired) == Verdict::acquired);
  CHECK(idem::backend::verdict_of(Decision::take_over_retry) == Verdict::acquired);
  CHECK(idem::backend::verdict_of(Decision::replay) == Verdict::replayed);
  CHECK(idem::backend::verdict_of(Decision::in_progress) == Verdict::in_progress);
  CHECK(idem::backend::verdict_of(Decision::conflict) == Verdict::conflict);
  CHECK(idem::backend::verdict_of(Decision::take_over_stale) == Verdict::acquired);
  CHECK(idem::backend::verdict_of(Decision::outcome_unknown) == Verdict::outcome_unknown);
  CHECK(idem::backend::is_takeover(Decision::take_over_stale));
  CHECK_FALSE(idem::backend::is_takeover(Decision::outcome_unknown));
  CHECK(idem::backend::is_takeover(Decision::take_over_expired));
  CHECK(idem::backend::is_takeover(Decision::take_over_retry));
  CHECK_FALSE(idem::backend::is_takeover(Decision::replay));
  CHECK_FALSE(idem::backend::is_takeover(Decision::in_progress));
  CHECK_FALSE(idem::backend::is_takeover(Decision::conflict));
  CHECK(idem::backend::to_string(Decision::take_over_retry) == "take_over_retry");
}

TEST_CASE("take_over: a retry keeps the record's history, an expired record starts afresh") {
  const auto now = t0 + 40s;
  SECTION("take_over_retry: fence + 1, attempts + 1, new owner and times, created_at kept") {
    const idem::Record stale = processing();
    const idem::Record r = idem::backend::take_over(stale, idem::backend::Decision::take_over_retry,
                                                    "fp-A", "owner-2", now, opts);
    CHECK(r.status == idem::Status::processing);
    CHECK(r.ticket == idem::Ticket{2, "owner-2"});
    CHECK(r.attempts == 2);
    CHECK(r.created_at == t0);
    CHECK(r.updated_at == now);
    CHECK(r.lease_until == now + 30s);
    CHECK(r.expire_at == now + 1h);  // a renewed attempt never expires under its own lease
    CHECK(r.fingerprint == "fp-A");
    CHECK(r.key == stale.key);
  }
  SECTION("take_over_retry over a retryable failure clears its snapshot and flag") {
    const idem::Record failed = with(processing(), idem::Status::failed, true);
    const idem::Record r = idem::backend::take_over(
        failed, idem::backend::Decision::take_over_retry, "fp-A", "owner-2", now, opts);
    CHECK(r.snapshot.empty());
    CHECK_FALSE(r.retryable);
    CHECK(r.status == idem::Status::processing);
  }
  SECTION("take_over_retry keeps the stored fingerprint, or takes the request's if none") {
    CHECK(idem::backend::take_over(processing("fp-A"), idem::backend::Decision::take_over_retry, "",
                                   "o", now, opts)
              .fingerprint == "fp-A");
    CHECK(idem::backend::take_over(processing(""), idem::backend::Decision::take_over_retry, "fp-B",
                                   "o", now, opts)
              .fingerprint == "fp-B");
  }
  SECTION("take_over_expired: the request's fingerprint, attempts 1, created now, fence + 1") {
    idem::Record old = with(processing(), idem::Status::succeeded);
    old.ticket.fence = 7;
    old.attempts = 3;
    const auto later = t0 + 2h;
    const idem::Record r = idem::backend::take_over(old, idem::backend::Decision::take_over_expired,
                                                    "fp-NEW", "owner-9", later, opts);
    CHECK(r.ticket == idem::Ticket{8, "owner-9"});  // fenced past every earlier claim
    CHECK(r.attempts == 1);
    CHECK(r.created_at == later);
    CHECK(r.fingerprint == "fp-NEW");
    CHECK(r.snapshot.empty());
    CHECK(r.status == idem::Status::processing);
  }
}

TEST_CASE("takeover_holds: the guard a takeover's write re-checks") {
  const idem::Record r = processing();
  CHECK_FALSE(idem::backend::takeover_holds(r, idem::backend::Decision::take_over_retry, t0 + 1s));
  CHECK(idem::backend::takeover_holds(r, idem::backend::Decision::take_over_retry, t0 + 30s));
  CHECK_FALSE(idem::backend::takeover_holds(r, idem::backend::Decision::take_over_retry,
                                            t0 + 1h));  // expired now
  CHECK(idem::backend::takeover_holds(r, idem::backend::Decision::take_over_expired, t0 + 1h));
  CHECK_FALSE(
      idem::backend::takeover_holds(r, idem::backend::Decision::take_over_expired, t0 + 30s));
  // A completion that landed after the read: a retry decided on the stale row must not hold.
  const idem::Record done = with(r, idem::Status::succeeded);
  CHECK_FALSE(
      idem::backend::takeover_holds(done, idem::backend::Decision::take_over_retry, t0 + 30s));
  CHECK(idem::backend::takeover_holds(with(r, idem::Status::failed, true),
                                      idem::backend::Decision::take_over_retry, t0 + 1s));
  CHECK_FALSE(idem::backend::takeover_holds(with(r, idem::Status::failed, false),
                                            idem::backend::Decision::take_over_retry, t0 + 30s));
}

TEST_CASE("holds and finished: complete and fail only over the very claim, values written") {
  const idem::Record r = processing();
  CHECK(idem::backend::holds(r, r.ticket));
  CHECK_FALSE(idem::backend::holds(r, idem::Ticket{1, "someone-else"}));
  CHECK_FALSE(idem::backend::holds(r, idem::Ticket{2, "owner-1"}));
  CHECK_FALSE(
      idem::backend::holds(with(r, idem::Status::succeeded), r.ticket));  // finished already
  CHECK_FALSE(idem::backend::holds(with(r, idem::Status::failed, true), r.ticket));

  const auto now = t0 + 5s;
  const idem::Record ok =
      idem::backend::finished(r, idem::Status::succeeded, R"({"ok":1})", true, now);
  CHECK(ok.status == idem::Status::succeeded);
  CHECK(ok.snapshot == R"({"ok":1})");
  CHECK_FALSE(ok.retryable);  // a success never carries the retryable flag
  CHECK(ok.updated_at == now);
  CHECK(ok.ticket == r.ticket);
  CHECK(ok.lease_until == r.lease_until);
  CHECK(idem::backend::finished_as(ok, r.ticket, idem::Status::succeeded, R"({"ok":1})", false));
  CHECK_FALSE(
      idem::backend::finished_as(ok, r.ticket, idem::Status::succeeded, R"({"ok":2})", false));
  CHECK_FALSE(idem::backend::finished_as(ok, idem::Ticket{2, "x"}, idem::Status::succeeded,
                                         R"({"ok":1})", false));

  const idem::Record bad =
      idem::backend::finished(r, idem::Status::failed, R"({"e":1})", true, now);
  CHECK(bad.status == idem::Status::failed);
  CHECK(bad.retryable);
  CHECK(idem::backend::finished_as(bad, r.ticket, idem::Status::failed, R"({"e":1})", true));
  CHECK_FALSE(idem::backend::finished_as(bad, r.ticket, idem::Status::failed, R"({"e":1})", false));
  CHECK_FALSE(idem::backend::finished_as(r, r.ticket, idem::Status::failed, R"({"e":1})", true));
}

TEST_CASE("is_stale and released: release_stale fails a dead worker's claim retryably") {
  const idem::Record r = processing();
  CHECK_FALSE(idem::backend::is_stale(r, t0 + 29s));
  CHECK(idem::backend::is_stale(r, t0 + 30s));
  CHECK_FALSE(idem::backend::is_stale(r, t0 + 1h));  // expired records are purged, not released
  CHECK_FALSE(idem::backend::is_stale(with(r, idem::Status::succeeded), t0 + 30s));
  CHECK_FALSE(idem::backend::is_stale(with(r, idem::Status::failed, true), t0 + 30s));

  const idem::Record out = idem::backend::released(r, t0 + 31s);
  CHECK(out.status == idem::Status::failed);
  CHECK(out.retryable);
  CHECK(out.snapshot == idem::backend::released_snapshot);
  CHECK(out.updated_at == t0 + 31s);
  CHECK_FALSE(idem::backend::holds(out, r.ticket));  // the stale worker's complete is LeaseLost
  CHECK(idem::backend::decide(out, "fp-A", t0 + 31s) == idem::backend::Decision::take_over_retry);
}

TEST_CASE("is_expired: purge_expired deletes exactly the records past expire_at") {
  const idem::Record r = processing();
  CHECK_FALSE(idem::backend::is_expired(r, t0 + 1h - 1ms));
  CHECK(idem::backend::is_expired(r, t0 + 1h));
  CHECK(idem::backend::is_expired(with(r, idem::Status::succeeded), t0 + 2h));
}

TEST_CASE("lease_lost: names the store, the key and the fence") {
  const idem::LeaseLost e =
      idem::backend::lease_lost("idem::mysql", idem::Key{"PAY", "k1"}, idem::Ticket{3, "o"});
  const std::string what = e.what();
  CHECK(what.find("idem::mysql: the claim on PAY/k1 (fence 3) is no longer held") == 0);
}

TEST_CASE("repaired: a fenced repair's values, for each action") {
  const auto now = t0 + 2h;  // past the record's expiry: a repair never leaves it expired
  idem::Record stale = processing();
  stale.recovery_points = R"({"charge":{"id":7}})";
  const idem::Repair base{.fence = 1, .reason = "gateway shows the charge", .keep = 24h};
  SECTION("complete: succeeded with the response") {
    idem::Repair r = base;
    r.action = idem::RepairAction::complete;
    r.snapshot = R"({"paid":true})";
    const idem::Record out = idem::backend::repaired(stale, r, "repairer", now);
    CHECK(out.status == idem::Status::succeeded);
    CHECK(out.snapshot == R"({"paid":true})");
    CHECK_FALSE(out.retryable);
    CHECK(out.ticket == idem::Ticket{2, "repairer"});
    CHECK(out.repair_reason == "gateway shows the charge");
    CHECK(out.repaired_at == now);
    CHECK(out.updated_at == now);
    CHECK(out.expire_at == now + 24h);
    CHECK(out.recovery_points == stale.recovery_points);
    CHECK(out.attempts == stale.attempts);
    CHECK_FALSE(idem::backend::holds(out, stale.ticket));  // the crashed worker's write is refused
  }
  SECTION("fail, release, mark_unknown") {
    idem::Repair r = base;
    r.action = idem::RepairAction::fail;
    r.retryable = true;
    idem::Record out = idem::backend::repaired(stale, r, "x", now);
    CHECK(out.status == idem::Status::failed);
    CHECK(out.retryable);
    CHECK(out.snapshot == idem::backend::repair_failed_snapshot);
    r.action = idem::RepairAction::release;
    out = idem::backend::repaired(stale, r, "x", now);
    CHECK(out.status == idem::Status::failed);
    CHECK(out.retryable);
    CHECK(idem::backend::decide(out, "fp-A", now) == idem::backend::Decision::take_over_retry);
    r.action = idem::RepairAction::mark_unknown;
    r.snapshot = R"({"error":"gateway down"})";
    out = idem::backend::repaired(stale, r, "x", now);
    CHECK(out.status == idem::Status::outcome_unknown);
    CHECK(out.snapshot == R"({"error":"gateway down"})");
    CHECK(idem::backend::decide(out, "fp-A", now) == idem::backend::Decision::outcome_unknown);
  }
  SECTION("expire_at is never shortened") {
    idem::Repair r = base;
    r.keep = 1ms;
    CHECK(idem::backend::repaired(stale, r, "x", t0).expire_at == stale.expire_at);
  }
  SECTION("repair_holds: only at the fence read") {
    CHECK(idem::backend::repair_holds(stale, 1));
    CHECK_FALSE(idem::backend::repair_holds(stale, 2));
  }
}

TEST_CASE("validate(Repair): a bad repair is InvalidArgument") {
  const idem::Repair good{
      .action = idem::RepairAction::complete, .fence = 3, .snapshot = "{}", .reason = "ok"};
  CHECK_NOTHROW(idem::validate(good));
  auto bad = [&](auto change) {
    idem::Repair r = good;
    change(r);
    return r;
  };
  CHECK_THROWS_AS(idem::validate(bad([](auto& r) { r.fence = 0; })), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(bad([](auto& r) { r.reason.clear(); })), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(bad([](auto& r) { r.reason = "a\nb"; })), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(bad([](auto& r) { r.reason = std::string(513, 'x'); })),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(bad([](auto& r) { r.snapshot.clear(); })), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(bad([](auto& r) { r.snapshot = "{not json"; })),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(bad([](auto& r) { r.keep = idem::Duration::zero(); })),
                  idem::InvalidArgument);
  CHECK_NOTHROW(idem::validate(bad([](auto& r) {
    r.action = idem::RepairAction::release;
    r.snapshot.clear();
  })));
}

TEST_CASE("require_key_read: a read answering another key's record is CorruptRecord") {
  const idem::Record read = processing();
  CHECK_NOTHROW(idem::backend::require_key_read("test", idem::Key{"PAY", "k1"}, read));
  // Keys that a case-insensitive or accent-insensitive comparison would merge, and another
  // biz_type: each is another key.
  for (const idem::Key& other : {idem::Key{"PAY", "K1"}, idem::Key{"pay", "k1"},
                                 idem::Key{"REFUND", "k1"}, idem::Key{"PAY", "k1 "}}) {
    CHECK_THROWS_AS(idem::backend::require_key_read("test", other, read), idem::CorruptRecord);
  }
}
