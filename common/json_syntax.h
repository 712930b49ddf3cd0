// Where a JSON document is malformed, for config and rule loaders that must
// tell an operator exactly what to fix.
#ifndef VIGIL_COMMON_JSON_SYNTAX_H_
#define VIGIL_COMMON_JSON_SYNTAX_H_

#include <string>
#include <string_view>

namespace vigil {

// "line L, column C (byte B): message" for the first syntax error in
// `text`, or "" when `text` is well-formed JSON.
std::string JsonSyntaxError(std::string_view text);

}  // namespace vigil

#endif  // VIGIL_COMMON_JSON_SYNTAX_H_
