#include "storage/series_store.h"

#include <utility>

namespace vigil {
namespace {

// Collects the parts in memory and stores them with PutState.
class CollectingStateWriter : public StateWriter {
 public:
  CollectingStateWriter(SeriesStore* store, std::string key)
      : store_(store), key_(std::move(key)) {}
  absl::Status Append(std::string_view part) override {
    value_.append(part);
    return absl::OkStatus();
  }
  absl::Status Commit() override {
    if (committed_) return absl::FailedPreconditionError("state already committed");
    committed_ = true;
    return store_->PutState(key_, value_);
  }

 private:
  SeriesStore* store_;
  std::string key_;
  std::string value_;
  bool committed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateWriter>> SeriesStore::NewStateWriter(
    std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("state key is empty");
  return std::make_unique<CollectingStateWriter>(this, std::string(key));
}

}  // namespace vigil
