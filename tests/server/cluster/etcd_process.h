// A throwaway single-member etcd on loopback for tests (the real binary
// from Debian's etcd-server); tests skip when it is not installed.
#ifndef VIGIL_TESTS_SERVER_CLUSTER_ETCD_PROCESS_H_
#define VIGIL_TESTS_SERVER_CLUSTER_ETCD_PROCESS_H_

#include <sys/types.h>

#include <string>

namespace vigil::cluster {

class EtcdProcess {
 public:
  // True when an `etcd` binary is on PATH.
  static bool Available();
  // Starts etcd in a fresh temporary directory and waits until it answers
  // (up to 10 s); url() is empty when it did not. With `tls`, it serves
  // https:// with a certificate of a CA made for it (openssl) and asks
  // clients for a certificate of that CA (--client-cert-auth).
  explicit EtcdProcess(bool tls = false);
  // Kills it and removes its directory.
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "http://127.0.0.1:PORT" (https:// with tls), or "" when it failed to
  // start.
  const std::string& url() const { return url_; }
  // With tls: the CA's certificate, and a client certificate and key it
  // signed (PEM files).
  std::string ca_file() const { return dir_ + "/ca.pem"; }
  std::string client_cert_file() const { return dir_ + "/client.pem"; }
  std::string client_key_file() const { return dir_ + "/client-key.pem"; }

 private:
  pid_t pid_ = -1;
  std::string dir_;
  std::string url_;
};

// A loopback port nobody listens on right now.
int FreePort();

}  // namespace vigil::cluster

#endif  // VIGIL_TESTS_SERVER_CLUSTER_ETCD_PROCESS_H_
