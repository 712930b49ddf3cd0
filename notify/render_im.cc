// Chat channels: Slack, Feishu/Lark, DingTalk and WeCom bots.
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "notify/render_internal.h"
#include "notify/signing.h"

namespace vigil::notify_internal {
namespace {

constexpr size_t kSlackHeaderMaxChars = 150;
constexpr size_t kSlackSectionMaxChars = 3000;
constexpr size_t kDingTalkMaxBytes = 20000;
constexpr size_t kWeComMaxBytes = 4096;

// Slack mrkdwn needs &, < and > escaped.
std::string SlackEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// A Slack text object.
nlohmann::json SlackText(std::string_view type, std::string_view text) {
  return {{"type", type}, {"text", text}};
}

// A Feishu text element.
nlohmann::json LarkText(std::string_view tag, std::string_view content) {
  return {{"tag", tag}, {"content", content}};
}

// "Incident inc-1 · trigger · started 2025-11-24T16:00:00Z".
std::string IncidentLine(const Notice& notice) {
  return absl::StrCat("Incident ", notice.incident_id, " \xc2\xb7 ",
                      notice.event, " \xc2\xb7 started ",
                      Rfc3339(notice.incident_ts));
}

// The facts as "Label: value" lines, empty ones left out.
std::vector<std::string> FactLines(const Notice& notice) {
  std::vector<std::string> lines;
  auto add = [&lines](std::string_view label, const std::string& value) {
    if (!value.empty())
      lines.push_back(absl::StrCat(std::string(label), value));
  };
  add("Job: ", notice.job);
  add("Node: ", notice.node);
  if (notice.gpu.has_value()) add("GPU: ", absl::StrCat(*notice.gpu));
  add("Hint: ", notice.hint);
  add("Acknowledged by: ", notice.acknowledged_by);
  return lines;
}

// A markdown message body shared by the bots that take markdown; lines
// joined with `separator` (DingTalk needs blank lines between them).
std::string MarkdownBody(const Notice& notice, std::string_view separator) {
  std::vector<std::string> lines;
  if (!notice.summary.empty()) {
    lines.push_back(absl::StrCat("**", notice.summary, "**"));
  }
  for (std::string& line : FactLines(notice)) lines.push_back(std::move(line));
  lines.push_back(IncidentLine(notice));
  if (!notice.url.empty()) {
    lines.push_back(absl::StrCat("[Open incident](", notice.url, ")"));
  }
  return absl::StrJoin(lines, std::string(separator));
}

}  // namespace

Rendered RenderSlack(const ReceiverConfig& receiver, const Notice& notice,
                     double /*now*/) {
  std::string section;
  if (!notice.summary.empty()) {
    absl::StrAppend(&section, "*", SlackEscape(notice.summary), "*\n");
  }
  for (const std::string& line : FactLines(notice)) {
    absl::StrAppend(&section, SlackEscape(line), "\n");
  }
  std::vector<std::string> mentions;
  for (const Recipient& recipient : notice.recipients) {
    if (!recipient.im.empty()) {
      mentions.push_back(absl::StrCat("<@", recipient.im, ">"));
    }
  }
  if (!mentions.empty()) {
    absl::StrAppend(&section, "Paging ", absl::StrJoin(mentions, " "));
  }
  if (section.empty()) section = SlackEscape(OneLine(notice));
  nlohmann::json blocks = nlohmann::json::array();
  blocks.push_back(
      {{"type", "header"},
       {"text", SlackText("plain_text", TruncateChars(Headline(notice),
                                                      kSlackHeaderMaxChars))}});
  blocks.push_back(
      {{"type", "section"},
       {"text",
        SlackText("mrkdwn", TruncateChars(section, kSlackSectionMaxChars))}});
  blocks.push_back(
      {{"type", "context"},
       {"elements", nlohmann::json::array({SlackText(
                        "mrkdwn", SlackEscape(IncidentLine(notice)))})}});
  if (!notice.url.empty()) {
    nlohmann::json button = {{"type", "button"},
                             {"text", SlackText("plain_text", "Open incident")},
                             {"url", notice.url}};
    blocks.push_back(
        {{"type", "actions"}, {"elements", nlohmann::json::array({button})}});
  }
  const nlohmann::json body = {{"text", OneLine(notice)}, {"blocks", blocks}};
  return std::vector<OutboundRequest>{
      NewJsonPost(Setting(receiver, "url"), body, notice)};
}

Rendered RenderFeishu(const ReceiverConfig& receiver, const Notice& notice,
                      double now) {
  nlohmann::json body;
  if (Setting(receiver, "msg_type", "interactive") == "text") {
    std::string text = OneLine(notice);
    if (!notice.url.empty()) absl::StrAppend(&text, "\n", notice.url);
    body = {{"msg_type", "text"}, {"content", {{"text", text}}}};
  } else {
    std::string color = "blue";
    if (notice.severity == "P0") color = "red";
    if (notice.severity == "P1") color = "orange";
    if (notice.severity == "P2") color = "yellow";
    if (notice.event == "resolved") color = "green";
    nlohmann::json elements = nlohmann::json::array();
    elements.push_back(
        {{"tag", "div"},
         {"text", LarkText("lark_md", MarkdownBody(notice, "\n"))}});
    if (!notice.url.empty()) {
      nlohmann::json button = {
          {"tag", "button"},
          {"text", LarkText("plain_text", "Open incident")},
          {"type", "primary"},
          {"url", notice.url}};
      elements.push_back(
          {{"tag", "action"}, {"actions", nlohmann::json::array({button})}});
    }
    body = {{"msg_type", "interactive"},
            {"card",
             {{"config", {{"wide_screen_mode", true}}},
              {"header",
               {{"template", color},
                {"title", LarkText("plain_text", Headline(notice))}}},
              {"elements", elements}}}};
  }
  const std::string secret = Setting(receiver, "secret");
  if (!secret.empty()) {
    const std::string timestamp =
        absl::StrCat(static_cast<int64_t>(std::floor(now)));
    body["timestamp"] = timestamp;
    body["sign"] =
        Base64Encode(HmacSha256(absl::StrCat(timestamp, "\n", secret), ""));
  }
  return std::vector<OutboundRequest>{
      NewJsonPost(Setting(receiver, "url"), body, notice)};
}

Rendered RenderDingTalk(const ReceiverConfig& receiver, const Notice& notice,
                        double now) {
  const std::vector<std::string> phones = Phones(notice);
  std::string text = MarkdownBody(notice, "\n\n");
  if (!phones.empty()) {
    // DingTalk only highlights the mobiles that also appear in the text.
    absl::StrAppend(&text, "\n\n@", absl::StrJoin(phones, " @"));
  }
  const nlohmann::json body = {
      {"msgtype", "markdown"},
      {"markdown",
       {{"title", Headline(notice)},
        {"text", absl::StrCat("### ", Headline(notice), "\n\n",
                              TruncateUtf8(text, kDingTalkMaxBytes))}}},
      {"at", {{"atMobiles", phones}, {"isAtAll", false}}}};
  std::string url = Setting(receiver, "url");
  const std::string secret = Setting(receiver, "secret");
  if (!secret.empty()) {
    const std::string timestamp =
        absl::StrCat(static_cast<int64_t>(std::floor(now * 1000)));
    const std::string sign =
        Base64Encode(HmacSha256(secret, absl::StrCat(timestamp, "\n", secret)));
    url = AppendQuery(
        url, absl::StrCat("timestamp=", timestamp, "&sign=", UrlEncode(sign)));
  }
  return std::vector<OutboundRequest>{NewJsonPost(url, body, notice)};
}

Rendered RenderWeCom(const ReceiverConfig& receiver, const Notice& notice,
                     double /*now*/) {
  const std::string content =
      absl::StrCat("**", Headline(notice), "**\n", MarkdownBody(notice, "\n"));
  const nlohmann::json body = {
      {"msgtype", "markdown"},
      {"markdown", {{"content", TruncateUtf8(content, kWeComMaxBytes)}}}};
  return std::vector<OutboundRequest>{
      NewJsonPost(Setting(receiver, "url"), body, notice)};
}

}  // namespace vigil::notify_internal
