#include "tests/notify/test_receivers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace vigil::notify_test {
namespace {

constexpr int kSmtpAcceptTimeoutMs = 10000;

// A 127.0.0.1 socket bound to an ephemeral port; returns the fd and port.
std::pair<int, int> BindLoopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return {fd, ntohs(address.sin_port)};
}

// Reads CRLF-terminated lines from a socket.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // The next line without its CRLF; false at end of stream.
  bool Next(std::string* line) {
    while (true) {
      const size_t end = buffer_.find("\r\n");
      if (end != std::string::npos) {
        *line = buffer_.substr(0, end);
        buffer_.erase(0, end + 2);
        return true;
      }
      char chunk[4096];
      const ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (got <= 0) return false;
      buffer_.append(chunk, static_cast<size_t>(got));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

void SendLine(int fd, const std::string& line) {
  const std::string wire = line + "\r\n";
  ::send(fd, wire.data(), wire.size(), MSG_NOSIGNAL);
}

// The address inside "MAIL FROM:<a@b> SIZE=1" / "RCPT TO:<a@b>".
std::string AngleAddress(const std::string& line) {
  const size_t open = line.find('<');
  const size_t close = line.find('>', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

}  // namespace

std::string ReceivedRequest::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? "" : it->second;
}

std::string ReceivedRequest::Param(const std::string& name) const {
  auto it = params.find(name);
  return it == params.end() ? "" : it->second;
}

std::vector<std::string> ReceivedRequest::Params(
    const std::string& name) const {
  std::vector<std::string> values;
  auto [begin, end] = params.equal_range(name);
  for (auto it = begin; it != end; ++it) values.push_back(it->second);
  return values;
}

HttpReceiver::HttpReceiver() {
  auto handler = [this](const httplib::Request& request,
                        httplib::Response& response) {
    Handle(request, response);
  };
  server_.Get(R"(.*)", handler);
  server_.Post(R"(.*)", handler);
  port_ = server_.bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  while (port_ > 0 && !server_.is_running()) std::this_thread::yield();
}

HttpReceiver::~HttpReceiver() {
  server_.stop();
  thread_.join();
}

std::string HttpReceiver::base_url() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

void HttpReceiver::Reply(int status, std::string body,
                         std::multimap<std::string, std::string> headers) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = status;
  body_ = std::move(body);
  headers_ = std::move(headers);
}

std::vector<ReceivedRequest> HttpReceiver::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

void HttpReceiver::Handle(const httplib::Request& request,
                          httplib::Response& response) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_.push_back({request.method, request.path, request.body,
                       request.headers, request.params});
  response.status = status_;
  for (const auto& [name, value] : headers_) response.set_header(name, value);
  response.set_content(body_, "application/json");
}

SmtpReceiver::SmtpReceiver(std::string rcpt_reply)
    : rcpt_reply_(std::move(rcpt_reply)) {
  std::tie(listen_fd_, port_) = BindLoopback();
  ::listen(listen_fd_, 1);
  thread_ = std::thread([this] { Serve(); });
}

SmtpReceiver::~SmtpReceiver() {
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

std::string SmtpReceiver::url() const {
  return absl::StrCat("smtp://127.0.0.1:", port_);
}

ReceivedMail SmtpReceiver::Finish() {
  if (thread_.joinable()) thread_.join();
  return mail_;
}

void SmtpReceiver::Serve() {
  pollfd waiting{listen_fd_, POLLIN, 0};
  if (::poll(&waiting, 1, kSmtpAcceptTimeoutMs) != 1) return;
  const int fd = ::accept(listen_fd_, nullptr, nullptr);
  if (fd < 0) return;
  LineReader reader(fd);
  SendLine(fd, "220 localhost test SMTP");
  std::string line;
  while (reader.Next(&line)) {
    const std::string verb = line.substr(0, 4);
    if (absl::EqualsIgnoreCase(verb, "EHLO") ||
        absl::EqualsIgnoreCase(verb, "HELO")) {
      SendLine(fd, "250 localhost");
    } else if (absl::StartsWithIgnoreCase(line, "MAIL FROM:")) {
      mail_.mail_from = AngleAddress(line);
      SendLine(fd, "250 OK");
    } else if (absl::StartsWithIgnoreCase(line, "RCPT TO:")) {
      mail_.rcpt_to.push_back(AngleAddress(line));
      SendLine(fd, rcpt_reply_);
    } else if (absl::EqualsIgnoreCase(line, "DATA")) {
      SendLine(fd, "354 End data with <CR><LF>.<CR><LF>");
      while (reader.Next(&line) && line != ".") {
        // RFC 5321 4.5.2: a leading dot was doubled by the sender.
        if (absl::StartsWith(line, ".")) line.erase(0, 1);
        absl::StrAppend(&mail_.data, line, "\r\n");
      }
      SendLine(fd, "250 OK: queued");
    } else if (absl::EqualsIgnoreCase(line, "QUIT")) {
      mail_.quit = true;
      SendLine(fd, "221 Bye");
      break;
    } else if (absl::EqualsIgnoreCase(line, "RSET") ||
               absl::EqualsIgnoreCase(line, "NOOP")) {
      SendLine(fd, "250 OK");
    } else {
      SendLine(fd, "502 Command not implemented");
    }
  }
  ::close(fd);
}

std::string TestHmac(const char* digest_name, const std::string& key,
                     const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_get_digestbyname(digest_name), key.data(),
       static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       out, &length);
  return std::string(reinterpret_cast<char*>(out), length);
}

std::string TestSha256(const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), out, &length, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(out), length);
}

std::string TestBase64(const std::string& data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int length =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(data.data()),
                      static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(length));
  return out;
}

std::string TestBase64Decode(const std::string& text) {
  std::string compact;
  for (char c : text) {
    if (c != '\r' && c != '\n') compact.push_back(c);
  }
  std::string out(3 * (compact.size() / 4) + 3, '\0');
  const int length =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(compact.data()),
                      static_cast<int>(compact.size()));
  if (length < 0) return "";
  size_t padding = 0;
  while (padding < compact.size() &&
         compact[compact.size() - 1 - padding] == '=') {
    ++padding;
  }
  out.resize(static_cast<size_t>(length) - padding);
  return out;
}

std::string TestHex(const std::string& data) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : data) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string TestPercentEncode(const std::string& text) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
        (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  return out;
}

int UnusedPort() {
  auto [fd, port] = BindLoopback();
  ::close(fd);
  return port;
}

}  // namespace vigil::notify_test
