// vigilctl: the operator CLI over vigil-server's HTTP API. Everything but
// reading argv and the environment lives in vigil_ctl (ctl/ctl.h); see
// ctl/README.md or `vigilctl --help`.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "ctl/ctl.h"

int main(int argc, char** argv) {
  vigil::ctl::Environment env;
  if (const char* server = std::getenv("VIGIL_SERVER")) env.server = server;
  if (const char* token = std::getenv("VIGIL_TOKEN")) env.token = token;
  return vigil::ctl::RunVigilCtl(
      std::vector<std::string>(argv + 1, argv + argc), env,
      vigil::ctl::Dependencies(), std::cout, std::cerr);
}
