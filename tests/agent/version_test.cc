// The version the agent reports to the server (hello, build_info) is the
// project's one version, the one every binary's --version prints.
#include <string>

#include "agent/stream_client.h"
#include "common/flags.h"
#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

TEST(AgentVersionTest, IsTheProjectVersion) {
  EXPECT_EQ(std::string(kAgentVersion), flags::Version())
      << "agent/stream_client.h's kAgentVersion differs from CMake's project(vigil VERSION ...)";
}

}  // namespace
}  // namespace vigil::agent
