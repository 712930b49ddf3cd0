#include "common/json_syntax.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vigil {
namespace {

using json = nlohmann::json;

// Records the position of nlohmann's first syntax error without throwing.
class SyntaxErrorSax : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    failed = true;
    this->position = position;
    message = ex.what();
    return false;
  }

  bool failed = false;
  std::size_t position = 0;
  std::string message;
};

}  // namespace

std::string JsonSyntaxError(std::string_view text) {
  SyntaxErrorSax sax;
  json::sax_parse(text.begin(), text.end(), &sax);
  if (!sax.failed) return "";
  // nlohmann reports the byte after the offending token; point at it.
  const size_t byte = std::min(sax.position, text.size());
  const size_t at = byte > 0 ? byte - 1 : 0;
  size_t line = 1, column = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  // Keep what follows "[json.exception.parse_error.101] parse error at
  // line L, column C: ", which repeats the position.
  std::string message = sax.message;
  if (const size_t col = message.find("column "); col != std::string::npos) {
    if (const size_t end = message.find(": ", col); end != std::string::npos) {
      message = message.substr(end + 2);
    }
  }
  return absl::StrCat("line ", line, ", column ", column, " (byte ", at,
                      "): ", message);
}

}  // namespace vigil
