// Keeps a worker thread alive through a bug: an exception that leaves a
// std::thread's function ends the whole process (std::terminate), and for
// an alerting service that is a silent outage. Loops of long-lived threads
// run each step through CatchAll, log what it caught and carry on.
#ifndef VIGIL_COMMON_CATCH_ALL_H_
#define VIGIL_COMMON_CATCH_ALL_H_

#include <exception>
#include <string>
#include <utility>

namespace vigil {

// Runs `body()`. Returns "" when it returned normally, else a description
// of what it threw (std::exception::what(), or "an unknown exception").
// Never throws itself.
template <typename Body>
std::string CatchAll(Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return std::string();
  } catch (const std::exception& e) {
    try {
      return std::string("exception: ") + e.what();
    } catch (...) {
      return "an exception (its message could not be copied)";
    }
  } catch (...) {
    return "an unknown exception";
  }
}

}  // namespace vigil

#endif  // VIGIL_COMMON_CATCH_ALL_H_
