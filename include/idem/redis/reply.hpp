#pragma once
// idem::redis::Reply: one reply of the server, owned (freed with it), read as the RESP2 types
// idem's commands answer with. Reading a reply as the wrong type is a StoreError: the server
// answered something idem did not ask for.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include "idem/errors.hpp"

namespace idem::redis {

// A non-owning view of a reply or of one element of an array reply.
class ReplyView {
 public:
  explicit ReplyView(const redisReply* r) noexcept : r_(r) {}

  bool is_nil() const noexcept { return r_->type == REDIS_REPLY_NIL; }
  bool is_error() const noexcept { return r_->type == REDIS_REPLY_ERROR; }
  bool is_array() const noexcept { return r_->type == REDIS_REPLY_ARRAY; }

  // A bulk string, a status or an error reply's text.
  std::string_view text() const {
    if (r_->type != REDIS_REPLY_STRING && r_->type != REDIS_REPLY_STATUS &&
        r_->type != REDIS_REPLY_ERROR) {
      throw unexpected("a string");
    }
    return {r_->str, r_->len};
  }
  std::int64_t integer() const {
    if (r_->type != REDIS_REPLY_INTEGER) throw unexpected("an integer");
    return r_->integer;
  }
  std::size_t size() const {
    if (r_->type != REDIS_REPLY_ARRAY) throw unexpected("an array");
    return r_->elements;
  }
  ReplyView operator[](std::size_t i) const {
    if (i >= size()) {
      throw StoreError(
          fmt::format("idem::redis: the server answered {} elements, idem expected more", size()),
          false);
    }
    return ReplyView(r_->element[i]);
  }

 private:
  StoreError unexpected(std::string_view wanted) const {
    return StoreError(fmt::format("idem::redis: the server answered with reply type {} where idem "
                                  "expected {}",
                                  r_->type, wanted),
                      false);
  }
  const redisReply* r_;
};

// An owned reply: a view that frees what it views when it goes.
class Reply : public ReplyView {
 public:
  explicit Reply(redisReply* r) noexcept : ReplyView(r), owned_(r) {}

 private:
  struct Free {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
  };
  std::unique_ptr<redisReply, Free> owned_;
};

}  // namespace idem::redis
