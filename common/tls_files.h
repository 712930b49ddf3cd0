// Reads the PEM files of a TLS set-up (certificate chains, CA bundles,
// private keys) and checks them with OpenSSL's libcrypto, so that a bad
// file is reported when a program starts, naming the file, instead of
// failing every TLS handshake later with a vague transport error.
#ifndef VIGIL_COMMON_TLS_FILES_H_
#define VIGIL_COMMON_TLS_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace vigil {

// The PEM text of the certificate (chain) in `path`; its first certificate
// is the leaf. kNotFound if the file cannot be read; kInvalidArgument if it
// holds no PEM certificate, one that does not parse, or a leaf that is not
// valid at Unix time `now` (expired, or not yet valid). Errors start with
// `path`.
absl::StatusOr<std::string> ReadCertificateFile(const std::string& path,
                                                double now);

// The PEM text of the CA bundle in `path`: one or more certificates, at
// least one of them valid at `now`. Fails as ReadCertificateFile does.
absl::StatusOr<std::string> ReadCaBundleFile(const std::string& path,
                                             double now);

// The PEM text of the private key in `key_path`, checked to belong to the
// leaf of `cert_pem` (read from `cert_path`, which errors name).
// kNotFound if unreadable; kInvalidArgument if it holds no parsable
// private key (an encrypted key counts as unparsable: nothing could type
// its passphrase) or one that does not match the certificate.
absl::StatusOr<std::string> ReadPrivateKeyFile(const std::string& key_path,
                                               const std::string& cert_pem,
                                               const std::string& cert_path);

}  // namespace vigil

#endif  // VIGIL_COMMON_TLS_FILES_H_
