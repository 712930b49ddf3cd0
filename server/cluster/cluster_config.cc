// The "cluster" section of the server config.
#include "server/cluster/cluster_config.h"

namespace vigil::cluster {

void ParseClusterSection(const nlohmann::json& section, JsonConfigReader& r,
                         std::optional<ClusterOptions>* out) {
  const std::string path = "cluster";
  if (!r.CheckObject(section, path,
                     {"etcd_endpoints", "etcd_ca_file", "etcd_cert_file", "etcd_key_file",
                      "etcd_username", "etcd_password_file", "peer_secret_file", "prefix",
                      "shard", "replica",
                      "advertise_grpc", "advertise_http", "lease_seconds", "poll_seconds",
                      "profile_backup_seconds"})) {
    return;
  }
  ClusterOptions o;
  r.StringList(section, path, "etcd_endpoints", &o.etcd_endpoints);
  r.String(section, path, "etcd_ca_file", &o.etcd_ca_file);
  r.String(section, path, "etcd_cert_file", &o.etcd_cert_file);
  r.String(section, path, "etcd_key_file", &o.etcd_key_file);
  r.String(section, path, "etcd_username", &o.etcd_username);
  r.String(section, path, "etcd_password_file", &o.etcd_password_file);
  r.String(section, path, "peer_secret_file", &o.peer_secret_file);
  r.String(section, path, "prefix", &o.prefix);
  r.String(section, path, "shard", &o.shard);
  r.String(section, path, "replica", &o.replica);
  r.String(section, path, "advertise_grpc", &o.advertise_grpc);
  r.String(section, path, "advertise_http", &o.advertise_http);
  r.Integer(section, path, "lease_seconds", 2, 60, 1, &o.lease_seconds);
  r.Positive(section, path, "poll_seconds", 1, 20, &o.poll_seconds);
  r.Integer(section, path, "profile_backup_seconds", 0, 86400, 1, &o.profile_backup_seconds);
  *out = std::move(o);
}

}  // namespace vigil::cluster
