// The seam between detection and what follows it: DetectionService hands
// every incident update (with its server id) to an IncidentListener.
#ifndef VIGIL_SERVER_DETECTION_INCIDENT_LISTENER_H_
#define VIGIL_SERVER_DETECTION_INCIDENT_LISTENER_H_

#include "rules/incident.h"

namespace vigil {

// Receives incident updates in order, per incident. Called with the
// detection pipeline lock held: implementations must not call back into
// DetectionService methods that run the pipeline (PublishExternal).
class IncidentListener {
 public:
  virtual ~IncidentListener() = default;
  virtual void OnIncidentUpdate(const IncidentUpdate& update) = 0;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_DETECTION_INCIDENT_LISTENER_H_
