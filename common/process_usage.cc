#include "common/process_usage.h"

#include <dirent.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>

namespace vigil {
namespace {

// Seconds since boot when this process started: field 22 of
// /proc/self/stat, in clock ticks; -1 if unreadable.
double StartSecondsAfterBoot() {
  std::FILE* f = std::fopen("/proc/self/stat", "r");
  if (f == nullptr) return -1;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and ')': fields after it
  // start after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return -1;
  ++p;
  // p is before field 3; field 22 is 19 fields further.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p + 1, ' ');
    if (p == nullptr) return -1;
  }
  unsigned long long ticks = 0;
  if (std::sscanf(p, " %llu", &ticks) != 1) return -1;
  const long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? static_cast<double>(ticks) / hz : -1;
}

double CountOpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  double n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n > 0 ? n - 1 : 0;  // the directory's own descriptor
}

}  // namespace

ProcessUsage ReadProcessUsage() {
  ProcessUsage u;
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    u.cpu_seconds = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                    ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    u.max_resident_bytes = ru.ru_maxrss * 1024.0;
  }
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long size = 0, resident = 0;
    if (std::fscanf(f, "%lu %lu", &size, &resident) == 2) {
      u.resident_bytes = static_cast<double>(resident) * sysconf(_SC_PAGESIZE);
    }
    std::fclose(f);
  }
  struct timespec boot_now, real_now;
  const double after_boot = StartSecondsAfterBoot();
  if (after_boot >= 0 && clock_gettime(CLOCK_BOOTTIME, &boot_now) == 0 &&
      clock_gettime(CLOCK_REALTIME, &real_now) == 0) {
    const double boot = real_now.tv_sec + real_now.tv_nsec / 1e9 -
                        (boot_now.tv_sec + boot_now.tv_nsec / 1e9);
    u.start_time_seconds = boot + after_boot;
  }
  u.open_fds = CountOpenFds();
  return u;
}

double HeapInUseBytes() {
#if defined(__GLIBC__)
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
#else
  return 0;
#endif
}

}  // namespace vigil
