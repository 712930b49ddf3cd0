// Test helper: a remote-write request body decoded back (snappy, then the
// protobuf WriteRequest); a body that does not decode fails the test.
#ifndef VIGIL_TESTS_SERVER_REMOTE_WRITE_DECODE_H_
#define VIGIL_TESTS_SERVER_REMOTE_WRITE_DECODE_H_

#include <snappy.h>

#include <string>

#include "gtest/gtest.h"
#include "prometheus/remote_write.pb.h"

namespace vigil {

inline prometheus::WriteRequest Decode(const std::string& body) {
  std::string plain;
  EXPECT_TRUE(snappy::Uncompress(body.data(), body.size(), &plain));
  prometheus::WriteRequest request;
  EXPECT_TRUE(request.ParseFromString(plain));
  return request;
}

}  // namespace vigil

#endif  // VIGIL_TESTS_SERVER_REMOTE_WRITE_DECODE_H_
