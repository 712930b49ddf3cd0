// Checkpoint records of the first open-block format, for the tests that
// older data dirs still load.
#ifndef VIGIL_TESTS_STORAGE_XOR_FORMAT_RECORDS_H_
#define VIGIL_TESTS_STORAGE_XOR_FORMAT_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

namespace vigil::testing {

// The pieces of one open block as a server from before decimal coding
// (storage/compressed_samples.h) left them: records of format 0x47 (values
// XOR-coded only), 24 samples in three records (decimals, 0.1 + 0.2, 1e300,
// -0.0, NaN, 1/3, jittered timestamps), written by that code.
inline const char* const kXorRecords[] = {
    "\x47\x00\x08\xaf\x04\x00\x43\x07\x98\xb6\x9a\x01\x00\x00\xe8\x03\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x45\x40\x00\x02\x00\x00\x01\x9a"
    "\xb6\x97\xeb\xe8\x40\x73\x88\x00\x00\x00\x00\x00\xe3\xe8\xe9\x4f\xd7\x0a"
    "\x3d\x70\xa5\xc2\xff\x9c\x87\x21\xc8\x72\xf0\x35\xf7\x0f\xdf\xe8\x13\x55"
    "\x55\x55\x55\x54\xa8\x3c\x9a\xe1\xf7\x66\x68\xd5\x18\x3e\xfe\x37\xe4\x3c"
    "\x88\x00\x75\x9d\x60\x22\x80\x00\x00\x00\x00\x00",
    "\x47\x01\x08\xb6\x03\x07\x89\x26\x98\xb6\x9a\x01\x00\x00\xe8\x03\x00\x00"
    "\x00\x00\x00\x00\x55\x55\x55\x55\x55\x55\xd5\x3f\x01\x00\x01\x03\x5f\x60"
    "\x00\x08\x00\x00\x00\x00\x00\x10\x00\x1c\x00\x00\x00\x00\x00\x08\xfe\xf8"
    "\x00\x00\x00\x00\x00\x04\x7f\xca\x00\x00\x00\x00\x00\x04\x0d\x7d\x80\x00"
    "\xc0\x00\x00\x00\x00\x00\x61\xff\xfe\x5a\xaa\xaa\xaa\xaa\xaa\xa8",
    "\x47\x01\x08\xe8\x02\x05\xcf\x45\x98\xb6\x9a\x01\x00\x00\xeb\x03\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\xf0\x75\x40\x01\x00\xaa\xff\xaa\xaa"
    "\xaa\xaa\xaa\xaa\xaa\x40\xd7\xd2\x00\xeb\xc4\x00\x00\x00\x00\x00\x80\x00"
    "\x1f\x00\x00\x00\x00\x00\x20\x00\x07\x80\x00\x00\x00\x00\x10\x38\x00\x00"
    "\x80\x00\x00\x00\x00\x00",
};
inline const size_t kXorRecordSizes[] = {102, 88, 78};

// The records, in the order they continue each other.
inline std::vector<std::string> XorFormatRecords() {
  std::vector<std::string> records;
  for (size_t i = 0; i < std::size(kXorRecords); ++i)
    records.emplace_back(kXorRecords[i], kXorRecordSizes[i]);
  return records;
}

// The samples they hold: timestamps (ms) from 1764000001000, a second
// apart but 1.003 s every fifth.
inline void XorFormatSamples(std::vector<int64_t>* ts_ms, std::vector<double>* values) {
  *values = {312.5, 312.48, 311.9, 311.9, 0.1 + 0.2, 1e300, -0.0, 42, 42, 43, 44,
             std::numeric_limits<double>::quiet_NaN(), 7.25, 7.25, 7.5, 1.0 / 3, 2, 2,
             2, 2, 350.125, 349.75, 350, 351};
  ts_ms->clear();
  int64_t t = 1764000000000;
  for (size_t i = 0; i < values->size(); ++i) {
    t += i % 5 == 3 ? 1003 : 1000;
    ts_ms->push_back(t);
  }
}

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_STORAGE_XOR_FORMAT_RECORDS_H_
