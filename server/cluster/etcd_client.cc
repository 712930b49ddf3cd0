#include "server/cluster/etcd_client.h"

#include <cmath>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace vigil::cluster {
namespace {

using Json = nlohmann::json;

std::string Encode(std::string_view raw) {
  return absl::Base64Escape(absl::string_view(raw.data(), raw.size()));
}

// The gateway writes int64 fields as strings ("5"), omitting zeros.
int64_t IntField(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  int64_t value = 0;
  if (it->is_string() && absl::SimpleAtoi(it->get<std::string>(), &value)) return value;
  return 0;
}

absl::StatusOr<KeyValue> DecodeKeyValue(const Json& kv) {
  KeyValue out;
  std::string key;
  std::string value;
  if (!kv.is_object() || !absl::Base64Unescape(kv.value("key", ""), &key) ||
      !absl::Base64Unescape(kv.value("value", ""), &value)) {
    return absl::InternalError("etcd returned a key that is not base64");
  }
  out.key = std::move(key);
  out.value = std::move(value);
  out.create_revision = IntField(kv, "create_revision");
  out.mod_revision = IntField(kv, "mod_revision");
  out.lease = IntField(kv, "lease");
  return out;
}

}  // namespace

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    EtcdClientOptions options, std::unique_ptr<Transport> transport) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  const bool https = absl::StartsWith(options.endpoints.front(), "https://");
  for (const std::string& endpoint : options.endpoints) {
    if (!absl::StartsWith(endpoint, https ? "https://" : "http://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint '", endpoint, "': endpoints must all be http:// or all https:// URLs"));
    }
  }
  if (options.tls.cert_file.empty() != options.tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "etcd client certificate and key: give both (mutual TLS) or neither");
  }
  if (options.username.empty() && !options.password.empty()) {
    return absl::InvalidArgumentError("etcd password given without a username");
  }
  if (!(options.timeout_seconds > 0)) return absl::InvalidArgumentError("etcd timeout must be > 0");
  if (transport == nullptr) transport = NewCurlTransport(options.tls);
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options), std::move(transport)));
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    std::vector<std::string> endpoints, double timeout_seconds,
    std::unique_ptr<Transport> transport) {
  EtcdClientOptions options;
  options.endpoints = std::move(endpoints);
  options.timeout_seconds = timeout_seconds;
  return Create(std::move(options), std::move(transport));
}

EtcdClient::EtcdClient(EtcdClientOptions options, std::unique_ptr<Transport> transport)
    : endpoints_(std::move(options.endpoints)),
      timeout_seconds_(options.timeout_seconds),
      username_(std::move(options.username)),
      password_(std::move(options.password)),
      transport_(std::move(transport)) {}

EtcdClient::~EtcdClient() = default;

absl::StatusOr<Json> EtcdClient::Call(std::string_view path, const Json& body) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!username_.empty() && token_.empty()) {
    if (absl::Status s = AuthenticateLocked(); !s.ok()) return s;
  }
  absl::StatusOr<Json> answer = CallLocked(path, body);
  if (!username_.empty() && absl::IsUnauthenticated(answer.status())) {
    // The token expired (etcd's simple tokens last 5 min idle): once more.
    if (absl::Status s = AuthenticateLocked(); !s.ok()) return s;
    answer = CallLocked(path, body);
  }
  return answer;
}

absl::Status EtcdClient::AuthenticateLocked() {
  token_.clear();
  absl::StatusOr<Json> answer =
      CallLocked("/v3/auth/authenticate", {{"name", username_}, {"password", password_}});
  if (!answer.ok()) {
    return absl::Status(answer.status().code(),
                        absl::StrCat("etcd authentication as '", username_,
                                     "': ", answer.status().message()));
  }
  token_ = answer->value("token", "");
  if (token_.empty()) return absl::InternalError("etcd authenticated without giving a token");
  return absl::OkStatus();
}

absl::StatusOr<Json> EtcdClient::CallLocked(std::string_view path, const Json& body) {
  OutboundRequest request;
  request.headers = {{"Content-Type", "application/json"}};
  if (!token_.empty()) request.headers.emplace_back("Authorization", token_);
  request.body = body.dump();
  std::string failures;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t index = (preferred_ + i) % endpoints_.size();
    request.url = absl::StrCat(endpoints_[index], std::string(path));
    const TransportResult result = transport_->Send(request, timeout_seconds_);
    if (result.http_status == 0 || (result.http_status >= 500 && result.http_status != 501)) {
      absl::StrAppend(&failures, failures.empty() ? "" : "; ", endpoints_[index], ": ",
                      result.http_status == 0 ? result.error
                                              : absl::StrCat("HTTP ", result.http_status));
      continue;
    }
    preferred_ = index;
    // Streaming calls (lease keep-alive) answer newline-delimited objects:
    // the first one is the answer to our single request.
    std::string_view text = result.body;
    if (size_t newline = text.find('\n'); newline != std::string_view::npos &&
                                          newline + 1 < text.size()) {
      text = text.substr(0, newline);
    }
    Json answer = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (answer.is_discarded() || !answer.is_object()) {
      return absl::InternalError(absl::StrCat("etcd ", endpoints_[index], std::string(path),
                                              " answered HTTP ", result.http_status,
                                              " with no JSON object"));
    }
    if (answer.contains("error") || result.http_status >= 400) {
      const Json& error = answer.contains("error") && answer["error"].is_object()
                              ? answer["error"]
                              : answer;
      const std::string message =
          error.value("message", error.value("error", std::string("HTTP error")));
      const int code = static_cast<int>(IntField(error, "code"));
      if (code == 5) return absl::NotFoundError(absl::StrCat("etcd: ", message));
      // gRPC's UNAUTHENTICATED (bad or expired token, wrong password) and
      // PERMISSION_DENIED on a missing token ("user name is empty").
      if (code == 16 || absl::StrContains(message, "user name is empty") ||
          absl::StrContains(message, "invalid auth token") ||
          absl::StrContains(message, "authentication failed")) {
        return absl::UnauthenticatedError(absl::StrCat("etcd: ", message));
      }
      return absl::FailedPreconditionError(absl::StrCat("etcd: ", message));
    }
    if (answer.contains("result") && answer["result"].is_object()) return answer["result"];
    return answer;
  }
  return absl::UnavailableError(absl::StrCat("no etcd endpoint answered ", std::string(path), ": ", failures));
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(int ttl_seconds) {
  if (ttl_seconds < 1) return absl::InvalidArgumentError("lease TTL must be >= 1 s");
  absl::StatusOr<Json> answer = Call("/v3/lease/grant", {{"TTL", ttl_seconds}});
  if (!answer.ok()) return answer.status();
  const int64_t id = IntField(*answer, "ID");
  if (id == 0) return absl::InternalError("etcd granted a lease without an ID");
  return id;
}

absl::StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  absl::StatusOr<Json> answer =
      Call("/v3/lease/keepalive", {{"ID", absl::StrCat(lease)}});
  if (!answer.ok()) return answer.status();
  const int64_t ttl = IntField(*answer, "TTL");
  if (ttl <= 0) return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
  return ttl;
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  absl::StatusOr<Json> answer = Call("/v3/lease/revoke", {{"ID", absl::StrCat(lease)}});
  if (!answer.ok() && !absl::IsNotFound(answer.status())) return answer.status();
  return absl::OkStatus();
}

absl::Status EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  Json body = {{"key", Encode(key)}, {"value", Encode(value)}};
  if (lease != 0) body["lease"] = absl::StrCat(lease);
  return Call("/v3/kv/put", body).status();
}

absl::StatusOr<bool> EtcdClient::CreateIfAbsent(std::string_view key, std::string_view value,
                                                int64_t lease) {
  Json put = {{"key", Encode(key)}, {"value", Encode(value)}};
  if (lease != 0) put["lease"] = absl::StrCat(lease);
  Json body = {
      {"compare",
       Json::array({{{"key", Encode(key)},
                     {"result", "EQUAL"},
                     {"target", "CREATE"},
                     {"create_revision", "0"}}})},
      {"success", Json::array({{{"request_put", put}}})}};
  absl::StatusOr<Json> answer = Call("/v3/kv/txn", body);
  if (!answer.ok()) return answer.status();
  return answer->value("succeeded", false);
}

absl::StatusOr<bool> EtcdClient::DeleteIfValue(std::string_view key, std::string_view value) {
  Json body = {
      {"compare",
       Json::array({{{"key", Encode(key)},
                     {"result", "EQUAL"},
                     {"target", "VALUE"},
                     {"value", Encode(value)}}})},
      {"success", Json::array({{{"request_delete_range", {{"key", Encode(key)}}}}})}};
  absl::StatusOr<Json> answer = Call("/v3/kv/txn", body);
  if (!answer.ok()) return answer.status();
  return answer->value("succeeded", false);
}

absl::StatusOr<std::optional<KeyValue>> EtcdClient::Get(std::string_view key) {
  absl::StatusOr<Json> answer = Call("/v3/kv/range", {{"key", Encode(key)}});
  if (!answer.ok()) return answer.status();
  auto kvs = answer->find("kvs");
  if (kvs == answer->end() || !kvs->is_array() || kvs->empty()) return std::nullopt;
  absl::StatusOr<KeyValue> kv = DecodeKeyValue(kvs->front());
  if (!kv.ok()) return kv.status();
  return std::optional<KeyValue>(std::move(*kv));
}

absl::StatusOr<std::vector<KeyValue>> EtcdClient::GetPrefix(std::string_view prefix) {
  absl::StatusOr<Json> answer =
      Call("/v3/kv/range", {{"key", Encode(prefix)}, {"range_end", Encode(PrefixEnd(prefix))}});
  if (!answer.ok()) return answer.status();
  std::vector<KeyValue> out;
  auto kvs = answer->find("kvs");
  if (kvs == answer->end() || !kvs->is_array()) return out;
  for (const Json& item : *kvs) {
    absl::StatusOr<KeyValue> kv = DecodeKeyValue(item);
    if (!kv.ok()) return kv.status();
    out.push_back(std::move(*kv));
  }
  return out;
}

absl::Status EtcdClient::Delete(std::string_view key) {
  return Call("/v3/kv/deleterange", {{"key", Encode(key)}}).status();
}

absl::Status EtcdClient::DeletePrefix(std::string_view prefix) {
  return Call("/v3/kv/deleterange",
              {{"key", Encode(prefix)}, {"range_end", Encode(PrefixEnd(prefix))}})
      .status();
}

}  // namespace vigil::cluster
