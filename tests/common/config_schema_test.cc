// The config reference's recorder (common/config_schema.h) and the config
// reader in describe mode (common/json_reader.h).
#include "common/config_schema.h"

#include <string>
#include <vector>

#include "common/json_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

// The recorded key at `path`, or a failure.
const ConfigKey* KeyAt(const ConfigSchema& schema, const std::string& path) {
  for (const ConfigKey& key : schema.keys()) {
    if (key.path == path) return &key;
  }
  ADD_FAILURE() << "no key " << path;
  return nullptr;
}

TEST(ConfigSchemaTest, RecordsTypeRangeAndDefaultOfEveryKeyAskedFor) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  const Json section = Json::object();
  std::string name = "idle";
  bool on = true;
  double retention = 7 * 86400.0;
  uint64_t bytes = 64ull << 20;
  std::vector<std::string> list = {"a", "b"};
  ASSERT_TRUE(r.CheckObject(section, "storage", {"name", "on", "days", "mb", "list"}));
  r.String(section, "storage", "name", &name, "The name");
  r.Bool(section, "storage", "on", &on, "Whether on");
  r.Positive(section, "storage", "days", 86400, 3660, &retention, "Days kept");
  r.Integer(section, "storage", "mb", 1, 1 << 20, 1 << 20, &bytes,
            {"MiB held", "[1, 1048576], 0 excluded"});
  r.StringList(section, "storage", "list", &list, "Some names");

  const ConfigKey* key = KeyAt(schema, "storage.name");
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key->type, "string");
  EXPECT_EQ(key->default_value, "idle");
  EXPECT_EQ(key->meaning, "The name");
  EXPECT_EQ(KeyAt(schema, "storage.on")->default_value, true);
  // Defaults are in the key's own units: days, MiB.
  key = KeyAt(schema, "storage.days");
  EXPECT_EQ(key->type, "number");
  EXPECT_EQ(key->range, "(0, 3660]");
  EXPECT_EQ(key->default_value.dump(), "7");
  key = KeyAt(schema, "storage.mb");
  EXPECT_EQ(key->type, "integer");
  EXPECT_EQ(key->range, "[1, 1048576], 0 excluded");  // the doc's values win
  EXPECT_EQ(key->default_value.dump(), "64");
  key = KeyAt(schema, "storage.list");
  EXPECT_EQ(key->type, "string list");
  EXPECT_EQ(key->default_value, Json::array({"a", "b"}));
  EXPECT_TRUE(schema.CheckComplete().ok()) << schema.CheckComplete();
}

TEST(ConfigSchemaTest, DefaultIsTheValueAtReadTimeEvenWhenTheKeyIsPresent) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  int threads = 32;
  r.Integer(Json{{"threads", 4}}, "http", "threads", 1, 256, 1, &threads, "Threads");
  EXPECT_EQ(threads, 4);
  EXPECT_EQ(KeyAt(schema, "http.threads")->default_value, 32);
  EXPECT_EQ(KeyAt(schema, "http.threads")->range, "[1, 256]");
}

TEST(ConfigSchemaTest, StandsInEmptySectionsOnlyInDescribeMode) {
  const Json empty = Json::object();
  JsonConfigReader plain;
  EXPECT_EQ(plain.Object(empty, "", "storage", "Storage"), nullptr);
  EXPECT_EQ(plain.ObjectArray(empty, "auth", "tokens", Json::array(), "Tokens"), nullptr);
  EXPECT_EQ(plain.ObjectMap(empty, "watchdog", "headers", "name", "Headers"), nullptr);
  const Json present = {{"storage", {{"x", 1}}}};
  EXPECT_EQ(plain.Object(present, "", "storage", "Storage"), &present["storage"]);

  ConfigSchema schema;
  JsonConfigReader r(&schema);
  const Json* object = r.Object(empty, "", "storage", "Storage");
  ASSERT_NE(object, nullptr);
  EXPECT_EQ(*object, Json::object());
  const Json* array = r.ObjectArray(empty, "auth", "tokens", Json::array(), "Tokens");
  ASSERT_NE(array, nullptr);
  EXPECT_EQ(*array, Json::array({Json::object()}));
  const Json* map = r.ObjectMap(empty, "watchdog", "headers", "name", "Headers");
  ASSERT_NE(map, nullptr);
  EXPECT_EQ(*map, (Json{{"<name>", Json::object()}}));
  EXPECT_EQ(KeyAt(schema, "storage")->type, "object");
  EXPECT_TRUE(KeyAt(schema, "storage")->default_value.is_null());
  EXPECT_EQ(KeyAt(schema, "auth.tokens")->type, "array of objects");
  EXPECT_EQ(KeyAt(schema, "auth.tokens")->default_value, Json::array());
  EXPECT_EQ(KeyAt(schema, "watchdog.headers")->type, "map of <name> to object");
}

TEST(ConfigSchemaTest, ArrayIndicesBecomeBrackets) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  std::string role = "viewer";
  ASSERT_TRUE(r.CheckObject(Json::object(), "auth.tokens[12]", {"role"}));
  r.String(Json::object(), "auth.tokens[12]", "role", &role, "The role");
  r.String(Json::object(), "auth.tokens[13]", "role", &role, "Recorded once");
  ASSERT_EQ(schema.keys().size(), 1u);
  EXPECT_EQ(schema.keys()[0].path, "auth.tokens[].role");
  EXPECT_EQ(schema.keys()[0].meaning, "The role");
}

TEST(ConfigSchemaTest, CompletenessFailsForAnAcceptedButUndocumentedKey) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  std::string url;
  ASSERT_TRUE(r.CheckObject(Json::object(), "actuator", {"url", "secret_file"}));
  r.String(Json::object(), "actuator", "url", &url, "Where actions go");
  absl::Status s = schema.CheckComplete();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("actuator.secret_file: accepted but not documented"));
  EXPECT_THAT(s.message(), Not(HasSubstr("actuator.url")));

  // Documenting it, even read by hand, completes the reference.
  r.Value(Json::object(), "actuator", "secret_file", "string", "", "The secret's file");
  EXPECT_TRUE(schema.CheckComplete().ok()) << schema.CheckComplete();
}

TEST(ConfigSchemaTest, CompletenessFailsForASectionNeverWalkedInto) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  r.Object(Json::object(), "", "storage", "Storage");
  EXPECT_THAT(schema.CheckComplete().message(), HasSubstr("storage: section never visited"));
  r.CheckObject(Json::object(), "storage", {});
  EXPECT_TRUE(schema.CheckComplete().ok()) << schema.CheckComplete();
}

TEST(ConfigSchemaTest, CompletenessFailsForAKeyWithoutMeaning) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  bool on = false;
  r.Bool(Json::object(), "", "memory", &on, "");
  EXPECT_THAT(schema.CheckComplete().message(), HasSubstr("memory: no meaning"));
}

TEST(ConfigSchemaTest, AMapsCheckedNamesAreItsRangeNotKeysToDocument) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  const Json* channels =
      r.ObjectMap(Json::object(), "notifications", "channels", "channel", "Routes");
  ASSERT_NE(channels, nullptr);
  r.CheckObject(*channels, "notifications.channels", {"phone", "sms"});
  for (const auto& entry : channels->items()) {
    const std::string path = "notifications.channels." + entry.key();
    bool failover = false;
    r.CheckObject(entry.value(), path, {"failover"});
    r.Bool(entry.value(), path, "failover", &failover, "Fail over");
  }
  EXPECT_TRUE(schema.CheckComplete().ok()) << schema.CheckComplete();
  EXPECT_EQ(KeyAt(schema, "notifications.channels")->range, "keys: phone, sms");
  EXPECT_NE(KeyAt(schema, "notifications.channels.<channel>.failover"), nullptr);
}

TEST(ConfigSchemaTest, ToJsonListsKeysInTheOrderRead) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  double interval = 0.5;
  std::string server;
  r.Positive(Json::object(), "", "interval_seconds", 1, 3600, &interval, "Seconds between frames");
  r.String(Json::object(), "", "server", &server, {"The server", "HOST:PORT"});
  const Json out = schema.ToJson("vigil-agent");
  EXPECT_EQ(out["program"], "vigil-agent");
  ASSERT_EQ(out["keys"].size(), 2u);
  EXPECT_EQ(out["keys"][0],
            (Json{{"path", "interval_seconds"}, {"type", "number"}, {"range", "(0, 3600]"},
                  {"default", 0.5}, {"required", false},
                  {"meaning", "Seconds between frames"}}));
  EXPECT_EQ(out["keys"][1]["range"], "HOST:PORT");
}

TEST(ConfigSchemaTest, ARequiredKeyHasNoDefault) {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  std::string url;
  r.String(Json::object(), "remote_write", "url", &url,
           KeyDoc::Required("Where requests go", "http:// or https:// URL"));
  const ConfigKey* key = KeyAt(schema, "remote_write.url");
  ASSERT_NE(key, nullptr);
  EXPECT_TRUE(key->required);
  EXPECT_TRUE(key->default_value.is_null());
  EXPECT_EQ(key->range, "http:// or https:// URL");
  EXPECT_EQ(key->meaning, "Where requests go");
  EXPECT_EQ(schema.ToJson("vigil-server")["keys"][0]["required"], true);
}

TEST(ConfigSchemaTest, NumbersThatAreWholeAreIntegers) {
  EXPECT_EQ(ConfigSchema::Number(60.0).dump(), "60");
  EXPECT_EQ(ConfigSchema::Number(0.5).dump(), "0.5");
  EXPECT_EQ(ConfigSchema::Number(2592000.0).dump(), "2592000");
}

TEST(JsonConfigReaderTest, ErrorsAreUnchangedByDescribeMode) {
  const Json section = {{"days", 0}, {"threads", "many"}, {"name", 3}, {"extra", 1}};
  for (bool describe : {false, true}) {
    ConfigSchema schema;
    JsonConfigReader r(describe ? &schema : nullptr);
    double days = 7;
    int threads = 32;
    std::string name = "x";
    r.CheckObject(section, "s", {"days", "threads", "name"});
    r.Positive(section, "s", "days", 86400, 3660, &days, "Days");
    r.Integer(section, "s", "threads", 1, 256, 1, &threads, "Threads");
    r.String(section, "s", "name", &name, "Name");
    EXPECT_THAT(r.errors(), ::testing::ElementsAre("s.extra: unknown key",
                                                   "s.days: must be a number > 0 and <= 3660",
                                                   "s.threads: must be an integer in [1, 256]",
                                                   "s.name: must be a string"))
        << "describe " << describe;
    EXPECT_EQ(days, 7);
    EXPECT_EQ(threads, 32);
    EXPECT_EQ(name, "x");
  }
}

}  // namespace
}  // namespace vigil
