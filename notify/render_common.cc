// Helpers shared by the channel renderers (see render_internal.h).
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "notify/render_internal.h"

namespace vigil::notify_internal {
namespace {

constexpr char kEllipsis[] = "\xe2\x80\xa6";  // U+2026

bool IsContinuationByte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// Backs `cut` up to the start of the UTF-8 character it falls in.
size_t CharacterBoundary(std::string_view text, size_t cut) {
  while (cut > 0 && cut < text.size() && IsContinuationByte(text[cut])) --cut;
  return cut;
}

}  // namespace

std::string Setting(const ReceiverConfig& receiver, std::string_view key,
                    std::string_view fallback) {
  auto it = receiver.settings.find(std::string(key));
  if (it == receiver.settings.end() || !it->is_string() ||
      it->get_ref<const std::string&>().empty()) {
    return std::string(fallback);
  }
  return it->get<std::string>();
}

OutboundRequest NewHttpRequest(std::string method, std::string url,
                               const Notice& notice) {
  OutboundRequest request;
  request.method = std::move(method);
  request.url = std::move(url);
  request.headers = {{"Idempotency-Key", notice.key},
                     {"User-Agent", "vigil/1"}};
  return request;
}

OutboundRequest NewJsonPost(std::string url, const nlohmann::json& body,
                            const Notice& notice) {
  OutboundRequest request = NewHttpRequest("POST", std::move(url), notice);
  request.headers.emplace_back("Content-Type", "application/json");
  request.body = DumpJson(body);
  return request;
}

std::string DumpJson(const nlohmann::json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string AppendQuery(std::string_view url, std::string_view query) {
  std::string out(url);
  if (out.find('?') == std::string::npos) {
    out.push_back('?');
  } else if (out.back() != '?' && out.back() != '&') {
    out.push_back('&');
  }
  out.append(query);
  return out;
}

std::string Rfc3339(double unix_seconds) {
  return absl::FormatTime(
      "%Y-%m-%dT%H:%M:%SZ",
      absl::FromUnixSeconds(static_cast<int64_t>(std::floor(unix_seconds))),
      absl::UTCTimeZone());
}

std::string TruncateUtf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  const size_t room = max_bytes < sizeof(kEllipsis) - 1
                          ? 0
                          : max_bytes - (sizeof(kEllipsis) - 1);
  std::string out(text.substr(0, CharacterBoundary(text, room)));
  if (max_bytes >= sizeof(kEllipsis) - 1) out.append(kEllipsis);
  return out;
}

std::string TruncateChars(std::string_view text, size_t max_chars) {
  size_t chars = 0;
  for (char c : text) chars += IsContinuationByte(c) ? 0 : 1;
  if (chars <= max_chars) return std::string(text);
  if (max_chars == 0) return "";
  // Keep max_chars - 1 characters and the ellipsis.
  size_t kept = 0;
  size_t cut = 0;
  for (; cut < text.size(); ++cut) {
    if (IsContinuationByte(text[cut])) continue;
    if (kept == max_chars - 1) break;
    ++kept;
  }
  return absl::StrCat(std::string(text.substr(0, cut)), kEllipsis);
}

bool IsPageEvent(std::string_view event) {
  return event == "trigger" || event == "repage" || event == "escalate";
}

std::string Headline(const Notice& notice) {
  std::string out = absl::StrCat(notice.severity, " \xc2\xb7 ", notice.kind);
  if (notice.event != "trigger") {
    absl::StrAppend(&out, " \xc2\xb7 ", notice.event);
  }
  return out;
}

std::string Where(const Notice& notice) {
  std::string out = notice.node;
  if (notice.gpu.has_value()) {
    absl::StrAppend(&out, out.empty() ? "" : " ", "GPU ", *notice.gpu);
  }
  if (!notice.job.empty()) {
    absl::StrAppend(&out, out.empty() ? "job " : " (job ", notice.job,
                    out.empty() ? "" : ")");
  }
  return out.empty() ? "unknown location" : out;
}

std::string OneLine(const Notice& notice) {
  std::string out = absl::StrCat("[", notice.severity, "] ", notice.kind,
                                 " on ", Where(notice));
  if (notice.event == "acknowledged" && !notice.acknowledged_by.empty()) {
    absl::StrAppend(&out, " [acknowledged by ", notice.acknowledged_by, "]");
  } else if (notice.event != "trigger") {
    absl::StrAppend(&out, " [", notice.event, "]");
  }
  if (!notice.summary.empty()) absl::StrAppend(&out, ": ", notice.summary);
  return out;
}

std::vector<std::string> Phones(const Notice& notice) {
  std::vector<std::string> phones;
  for (const Recipient& recipient : notice.recipients) {
    if (!recipient.phone.empty()) phones.push_back(recipient.phone);
  }
  return phones;
}

}  // namespace vigil::notify_internal
