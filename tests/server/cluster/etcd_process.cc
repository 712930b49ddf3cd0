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

EtcdProcess::EtcdProcess() {
  char pattern[] = "/tmp/vigil-etcd-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return;
  dir_ = pattern;
  const int client_port = FreePort();
  const int peer_port = FreePort();
  const std::string client = absl::StrCat("http://127.0.0.1:", client_port);
  const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port);
  std::vector<std::string> args = {"etcd",
                                   "--data-dir", dir_ + "/data",
                                   "--listen-client-urls", client,
                                   "--advertise-client-urls", client,
                                   "--listen-peer-urls", peer,
                                   "--initial-advertise-peer-urls", peer,
                                   "--initial-cluster", "default=" + peer,
                                   "--log-level", "error"};
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
  absl::StatusOr<std::unique_ptr<EtcdClient>> etcd = EtcdClient::Create({client}, 0.5);
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
