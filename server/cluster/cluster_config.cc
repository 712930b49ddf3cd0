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
  r.StringList(section, path, "etcd_endpoints", &o.etcd_endpoints,
               KeyDoc::Required("etcd client URLs, here or by --etcd; any one that "
                                "answers is used, a failed request is tried on the next",
                                "all http:// or all https:// URLs"));
  r.String(section, path, "etcd_ca_file", &o.etcd_ca_file,
           "https:// endpoints: the PEM CA of etcd's certificate; empty: the system's "
           "CAs");
  r.String(section, path, "etcd_cert_file", &o.etcd_cert_file,
           "https:// endpoints: a PEM client certificate, for an etcd with "
           "--client-cert-auth; with etcd_key_file or neither");
  r.String(section, path, "etcd_key_file", &o.etcd_key_file,
           "The PEM key of etcd_cert_file");
  r.String(section, path, "etcd_username", &o.etcd_username,
           "etcd user whose role may read and write prefix; with etcd_password_file "
           "or neither");
  r.String(section, path, "etcd_password_file", &o.etcd_password_file,
           "File whose first line is etcd_username's password");
  r.String(section, path, "peer_secret_file", &o.peer_secret_file,
           "File holding a secret shared by every server of the fleet, with which a "
           "server vouches for its browser sessions' users on other shards; empty: "
           "browser sessions see their own server's shard only");
  r.String(section, path, "prefix", &o.prefix,
           {"etcd key prefix every key lives under; two installations can share an "
            "etcd with two prefixes",
            "starts with /"});
  r.String(section, path, "shard", &o.shard,
           KeyDoc::Required("The shard (pair) this server belongs to, e.g. s0; here or "
                            "by --shard",
                            "1-63 letters, digits, '-', '_' or '.'; not starting with '_'"));
  r.String(section, path, "replica", &o.replica,
           KeyDoc::Required("Its name within the pair, e.g. a or the pod name; here or "
                            "by --replica",
                            "1-63 letters, digits, '-', '_' or '.'"));
  r.String(section, path, "advertise_grpc", &o.advertise_grpc,
           KeyDoc::Required("Where agents reach this server; here or by --advertise-grpc",
                            "HOST:PORT"));
  r.String(section, path, "advertise_http", &o.advertise_http,
           KeyDoc::Required("Base URL of this server's HTTP API for the other servers; "
                            "here or by --advertise-http",
                            "URL"));
  r.Integer(section, path, "lease_seconds", 2, 60, 1, &o.lease_seconds,
            "TTL of the member's lease: how long after its last renewal a dead server "
            "still counts as alive and keeps its leaderships");
  r.Positive(section, path, "poll_seconds", 1, 20, &o.poll_seconds,
             "Seconds between lease renewals and reads of membership and leadership");
  r.Integer(section, path, "profile_backup_seconds", 0, 86400, 1, &o.profile_backup_seconds,
            "Seconds between the shard leader's backups of its jobs' changed learned "
            "profiles to the shard each would move to; 0: never. Needs "
            "peer_secret_file");
  *out = std::move(o);
}

}  // namespace vigil::cluster
