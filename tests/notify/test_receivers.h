// Local stand-ins for the services notifications go to: an HTTP receiver
// (httplib on 127.0.0.1:0) that records requests and answers as told, a
// one-session SMTP receiver, and independent re-implementations of the
// encodings the receivers check signatures with (OpenSSL directly, so a
// bug in notify/signing.cc cannot hide itself).
#ifndef VIGIL_TESTS_NOTIFY_TEST_RECEIVERS_H_
#define VIGIL_TESTS_NOTIFY_TEST_RECEIVERS_H_

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "httplib.h"

namespace vigil::notify_test {

// One request as the HTTP receiver saw it.
struct ReceivedRequest {
  std::string method;
  std::string path;
  std::string body;
  httplib::Headers headers;
  httplib::Params params;  // query, and the form body when form-encoded

  // The header's value, or "" (names are case-insensitive).
  std::string Header(const std::string& name) const;
  // The parameter's value, or "".
  std::string Param(const std::string& name) const;
  // All values of a repeated parameter, in order.
  std::vector<std::string> Params(const std::string& name) const;
};

// An HTTP server on 127.0.0.1:<any port> that records every request and
// answers each with the configured reply. Thread-safe.
class HttpReceiver {
 public:
  HttpReceiver();
  ~HttpReceiver();
  HttpReceiver(const HttpReceiver&) = delete;
  HttpReceiver& operator=(const HttpReceiver&) = delete;

  // "http://127.0.0.1:<port>".
  std::string base_url() const;
  // Answers later requests with `status`, `body` and `headers`.
  void Reply(int status, std::string body,
             std::multimap<std::string, std::string> headers = {});
  // Everything received so far, in arrival order.
  std::vector<ReceivedRequest> requests() const;

 private:
  void Handle(const httplib::Request& request, httplib::Response& response);

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  int status_ = 200;
  std::string body_ = "ok";
  std::multimap<std::string, std::string> headers_;
  std::vector<ReceivedRequest> requests_;
};

// What the SMTP receiver got in one session.
struct ReceivedMail {
  std::string mail_from;  // without the angle brackets
  std::vector<std::string> rcpt_to;
  std::string data;  // the message, dot-unstuffed, CRLF kept
  bool quit = false;
};

// An SMTP server on 127.0.0.1:<any port> that serves one session: greeting,
// EHLO/HELO, MAIL FROM, RCPT TO (answered with `rcpt_reply`), DATA, ".",
// QUIT. Gives up when no client comes within a few seconds.
class SmtpReceiver {
 public:
  explicit SmtpReceiver(std::string rcpt_reply = "250 OK");
  ~SmtpReceiver();
  SmtpReceiver(const SmtpReceiver&) = delete;
  SmtpReceiver& operator=(const SmtpReceiver&) = delete;

  // "smtp://127.0.0.1:<port>".
  std::string url() const;
  // Waits for the session to end and returns what it received.
  ReceivedMail Finish();

 private:
  void Serve();

  int listen_fd_ = -1;
  int port_ = 0;
  std::string rcpt_reply_;
  std::thread thread_;
  ReceivedMail mail_;
};

// Independent encodings for checking signatures.
std::string TestHmac(const char* digest_name, const std::string& key,
                     const std::string& message);
std::string TestSha256(const std::string& data);
std::string TestBase64(const std::string& data);
std::string TestBase64Decode(const std::string& text);
std::string TestHex(const std::string& data);
std::string TestPercentEncode(const std::string& text);  // RFC 3986

// A port on 127.0.0.1 that nothing listens on (bound, then closed).
int UnusedPort();

}  // namespace vigil::notify_test

#endif  // VIGIL_TESTS_NOTIFY_TEST_RECEIVERS_H_
