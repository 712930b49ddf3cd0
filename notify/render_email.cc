// Email: an RFC 5322 multipart message for SMTP submission, the diagnostic
// report attached when there is one.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "notify/render_internal.h"
#include "notify/signing.h"

namespace vigil::notify_internal {
namespace {

constexpr size_t kMaxLineBytes = 998;        // RFC 5322 line limit
constexpr size_t kBase64LineChars = 76;      // RFC 2045
constexpr size_t kEncodedWordMaxBytes = 45;  // 60 base64 chars per word

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// A header value on one line: control characters become spaces, so nothing
// from a notice can add headers.
std::string OneLineHeader(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

// RFC 2047 B-encoding when `text` is not ASCII, split into encoded words at
// character boundaries and folded.
std::string EncodeHeaderText(std::string_view text) {
  if (IsAscii(text)) return std::string(text);
  std::vector<std::string> words;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.size(), start + kEncodedWordMaxBytes);
    while (end < text.size() &&
           (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
      --end;
    }
    words.push_back(absl::StrCat(
        "=?UTF-8?B?", Base64Encode(text.substr(start, end - start)), "?="));
    start = end;
  }
  return absl::StrJoin(words, "\r\n ");
}

// `text` with every line ending as CRLF.
std::string ToCrlf(std::string_view text) {
  std::string lf = absl::StrReplaceAll(std::string(text), {{"\r\n", "\n"}});
  return absl::StrReplaceAll(lf, {{"\n", "\r\n"}});
}

// One MIME part: 7bit when `content` is short-lined ASCII, base64 otherwise.
std::string MimePart(std::string_view boundary, std::string_view headers,
                     std::string_view content) {
  bool seven_bit = IsAscii(content) && content.find('\0') == std::string::npos;
  size_t line_start = 0;
  while (seven_bit && line_start <= content.size()) {
    size_t line_end = content.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = content.size();
    seven_bit = line_end - line_start <= kMaxLineBytes;
    line_start = line_end + 1;
  }
  std::string encoded;
  if (seven_bit) {
    encoded = ToCrlf(content);
  } else {
    const std::string base64 = Base64Encode(content);
    for (size_t i = 0; i < base64.size(); i += kBase64LineChars) {
      absl::StrAppend(&encoded, base64.substr(i, kBase64LineChars), "\r\n");
    }
  }
  if (!encoded.empty() && !absl::EndsWith(encoded, "\r\n")) {
    encoded.append("\r\n");
  }
  return absl::StrCat("--", std::string(boundary), "\r\n", std::string(headers),
                      "Content-Transfer-Encoding: ",
                      seven_bit ? "7bit" : "base64", "\r\n\r\n", encoded);
}

// `text` with only characters safe in a file name or message id.
std::string SafeToken(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    const bool safe = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                      (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                      c == '.';
    if (!safe) c = '_';
  }
  return out;
}

std::string Subject(const Notice& notice) {
  std::string location = notice.node.empty() ? notice.job : notice.node;
  if (!notice.node.empty() && !notice.job.empty()) {
    absl::StrAppend(&location, " (", notice.job, ")");
  }
  if (location.empty()) location = "unknown location";
  return absl::StrCat(
      "[Vigil ", notice.severity,
      notice.event == "trigger" ? "" : absl::StrCat(" ", notice.event), "] ",
      notice.kind, " on ", location);
}

std::string TextBody(const Notice& notice) {
  std::vector<std::string> lines;
  if (!notice.summary.empty()) {
    lines.push_back(notice.summary);
    lines.push_back("");
  }
  auto add = [&lines](std::string_view label, const std::string& value) {
    if (!value.empty())
      lines.push_back(absl::StrCat(std::string(label), value));
  };
  add("Severity: ", notice.severity);
  add("Kind: ", notice.kind);
  add("Job: ", notice.job);
  add("Node: ", notice.node);
  if (notice.gpu.has_value()) add("GPU: ", absl::StrCat(*notice.gpu));
  add("Hint: ", notice.hint);
  add("State: ", notice.state);
  add("Acknowledged by: ", notice.acknowledged_by);
  add("Incident: ",
      absl::StrCat(notice.incident_id, " (", notice.event, ", started ",
                   Rfc3339(notice.incident_ts), ")"));
  add("Open: ", notice.url);
  return absl::StrCat(absl::StrJoin(lines, "\n"), "\n");
}

}  // namespace

Rendered RenderEmail(const ReceiverConfig& receiver, const Notice& notice,
                     double now) {
  std::vector<std::string> to;
  auto add_address = [&to](const std::string& address) {
    if (!address.empty() &&
        std::find(to.begin(), to.end(), address) == to.end()) {
      to.push_back(address);
    }
  };
  for (const Recipient& recipient : notice.recipients) {
    add_address(recipient.email);
  }
  const nlohmann::json& extra =
      receiver.settings.value("to", nlohmann::json::array());
  if (extra.is_string()) {
    add_address(extra.get<std::string>());
  } else {
    for (const nlohmann::json& address : extra) {
      add_address(address.get<std::string>());
    }
  }
  if (to.empty()) {
    return absl::InvalidArgumentError(
        "email: no recipient has an email address and settings.to is empty");
  }
  const std::string from = Setting(receiver, "from");
  const std::string boundary =
      absl::StrCat("vigil-", HexEncode(Sha256(notice.key)).substr(0, 24));
  std::string message = absl::StrCat(
      "From: ", OneLineHeader(from), "\r\n",
      "To: ", OneLineHeader(absl::StrJoin(to, ", ")), "\r\n",
      "Subject: ", EncodeHeaderText(OneLineHeader(Subject(notice))), "\r\n",
      "Date: ",
      absl::FormatTime(
          "%a, %d %b %Y %H:%M:%S +0000",
          absl::FromUnixSeconds(static_cast<int64_t>(std::floor(now))),
          absl::UTCTimeZone()),
      "\r\n", "Message-ID: <", SafeToken(notice.key), "@vigil>\r\n",
      "MIME-Version: 1.0\r\n", "Content-Type: multipart/mixed; boundary=\"",
      boundary, "\"\r\n\r\n");
  absl::StrAppend(
      &message,
      MimePart(boundary, "Content-Type: text/plain; charset=utf-8\r\n",
               TextBody(notice)));
  if (!notice.report.empty()) {
    const std::string filename =
        absl::StrCat(SafeToken(notice.incident_id), "-report.txt");
    absl::StrAppend(
        &message,
        MimePart(boundary,
                 absl::StrCat("Content-Type: text/plain; charset=utf-8\r\n"
                              "Content-Disposition: attachment; filename=\"",
                              filename, "\"\r\n"),
                 notice.report));
  }
  absl::StrAppend(&message, "--", boundary, "--\r\n");

  OutboundRequest request;
  request.smtp = true;
  request.url = Setting(receiver, "smtp_url");
  request.mail_from = from;
  request.mail_rcpt = std::move(to);
  request.username = Setting(receiver, "username");
  request.password = Setting(receiver, "password");
  request.body = std::move(message);
  return std::vector<OutboundRequest>{std::move(request)};
}

}  // namespace vigil::notify_internal
