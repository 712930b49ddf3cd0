#include "common/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"

namespace vigil {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;

// The file's text; kNotFound naming `what` if it cannot be read.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(path, ": cannot read the ", what));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad())
    return absl::NotFoundError(absl::StrCat(path, ": cannot read the ", what));
  return text.str();
}

// OpenSSL's most recent error, as text, and clears the queue.
std::string TakeOpenSslError() {
  unsigned long code = ERR_peek_last_error();
  std::string text = "unknown error";
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    text = buf;
  }
  ERR_clear_error();
  return text;
}

std::string FormatTime(const ASN1_TIME* t) {
  Bio bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), t);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, n > 0 ? static_cast<size_t>(n) : 0);
}

// Every certificate of `pem`; kInvalidArgument naming `path` if there is
// none or one does not parse.
absl::StatusOr<std::vector<Cert>> ParseCertificates(const std::string& path,
                                                    const std::string& pem) {
  constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----";
  size_t expected = 0;
  for (size_t at = pem.find(kBegin); at != std::string::npos;
       at = pem.find(kBegin, at + 1))
    ++expected;
  if (expected == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no PEM certificate (\"", std::string(kBegin), "\") in it"));
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<Cert> certs;
  std::string error;  // why reading stopped: the end, or a bad certificate
  while (true) {
    Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) {
      error = TakeOpenSslError();
      break;
    }
    certs.push_back(std::move(cert));
  }
  if (certs.size() != expected)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": certificate ", certs.size() + 1, " of ", expected,
                     " does not parse: ", error));
  return certs;
}

// OK if `cert` is valid at `now`; else why not.
absl::Status CheckValidity(const std::string& path, X509* cert, double now) {
  time_t t = static_cast<time_t>(now);
  if (X509_cmp_time(X509_get0_notAfter(cert), &t) < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the certificate expired on ",
                     FormatTime(X509_get0_notAfter(cert))));
  if (X509_cmp_time(X509_get0_notBefore(cert), &t) > 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the certificate is not valid before ",
                     FormatTime(X509_get0_notBefore(cert))));
  return absl::OkStatus();
}

// A passphrase callback that never prompts: encrypted keys fail to load.
int NoPassphrase(char*, int, int, void*) { return -1; }

}  // namespace

absl::StatusOr<std::string> ReadCertificateFile(const std::string& path,
                                                double now) {
  absl::StatusOr<std::string> pem = ReadFile(path, "certificate");
  if (!pem.ok()) return pem.status();
  absl::StatusOr<std::vector<Cert>> certs = ParseCertificates(path, *pem);
  if (!certs.ok()) return certs.status();
  if (absl::Status s = CheckValidity(path, certs->front().get(), now); !s.ok())
    return s;
  return pem;
}

absl::StatusOr<std::string> ReadCaBundleFile(const std::string& path,
                                             double now) {
  absl::StatusOr<std::string> pem = ReadFile(path, "CA bundle");
  if (!pem.ok()) return pem.status();
  absl::StatusOr<std::vector<Cert>> certs = ParseCertificates(path, *pem);
  if (!certs.ok()) return certs.status();
  absl::Status first;
  for (const Cert& cert : *certs) {
    absl::Status s = CheckValidity(path, cert.get(), now);
    if (s.ok()) return pem;
    if (first.ok()) first = s;
  }
  return first;
}

absl::StatusOr<std::string> ReadPrivateKeyFile(const std::string& key_path,
                                               const std::string& cert_pem,
                                               const std::string& cert_path) {
  absl::StatusOr<std::string> pem = ReadFile(key_path, "private key");
  if (!pem.ok()) return pem.status();
  Bio bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat(key_path,
                     ": no usable PEM private key (an encrypted key is not "
                     "supported): ",
                     TakeOpenSslError()));
  Bio cert_bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  Cert cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(
        cert_path,
        ": no certificate to check the key against: ", TakeOpenSslError()));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(key_path,
                     ": the private key does not belong to the "
                     "certificate in ",
                     cert_path));
  }
  return pem;
}

}  // namespace vigil
