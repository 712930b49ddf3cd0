#include "tests/server/cluster/etcd_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/cluster/etcd_client.h"

namespace vigil::cluster {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

bool EtcdProcess::Available() { return system("command -v etcd >/dev/null 2>&1") == 0; }

namespace {

// A CA, a server certificate for 127.0.0.1 and a client certificate, made
// with the openssl command in `dir`. False when openssl failed.
bool MakeCertificates(const std::string& dir) {
  const std::string script = absl::StrCat(
      "cd '", dir, "' && exec >openssl.log 2>&1 && "
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=vigil-test-ca "
      "-keyout ca-key.pem -out ca.pem && "
      "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server-key.pem "
      "-out server.csr && "
      "printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 "
      "-extfile server.ext -out server.pem && "
      "openssl req -newkey rsa:2048 -nodes -subj /CN=vigil -keyout client-key.pem "
      "-out client.csr && "
      "printf 'extendedKeyUsage=clientAuth\n' >client.ext && "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 "
      "-extfile client.ext -out client.pem");
  return system(script.c_str()) == 0;
}

}  // namespace

EtcdProcess::EtcdProcess(bool tls) {
  char pattern[] = "/tmp/vigil-etcd-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return;
  dir_ = pattern;
  if (tls && !MakeCertificates(dir_)) return;
  const int client_port = FreePort();
  const int peer_port = FreePort();
  const std::string client =
      absl::StrCat(tls ? "https" : "http", "://127.0.0.1:", client_port);
  const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port);
  std::vector<std::string> args = {"etcd",
                                   "--data-dir", dir_ + "/data",
                                   "--listen-client-urls", client,
                                   "--advertise-client-urls", client,
                                   "--listen-peer-urls", peer,
                                   "--initial-advertise-peer-urls", peer,
                                   "--initial-cluster", "default=" + peer,
                                   "--log-level", "error"};
  if (tls) {
    for (std::string arg : {"--cert-file=" + dir_ + "/server.pem",
                            "--key-file=" + dir_ + "/server-key.pem",
                            "--trusted-ca-file=" + ca_file(), std::string("--client-cert-auth")})
      args.push_back(arg);
  }
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const std::string log = dir_ + "/etcd.log";
    if (freopen(log.c_str(), "w", stderr) == nullptr) _exit(126);
    execvp("etcd", argv.data());
    _exit(127);
  }
  EtcdClientOptions options;
  options.endpoints = {client};
  options.timeout_seconds = 0.5;
  if (tls) options.tls = {ca_file(), client_cert_file(), client_key_file()};
  absl::StatusOr<std::unique_ptr<EtcdClient>> etcd = EtcdClient::Create(std::move(options));
  for (int i = 0; i < 100 && etcd.ok(); ++i) {
    if ((*etcd)->Get("/ping").ok()) {
      url_ = client;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

EtcdProcess::~EtcdProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

}  // namespace vigil::cluster
