from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores

WANT = {"title": "Vendor sync", "start": "2026-12-03T14:00", "end": "2026-12-03T14:30"}


class VendorSyncGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None,
              env_snapshot=None):
        scores = DimensionScores(robustness=self.compute_robustness(dispatches))
        created = self.get_service_actions(audit_data, "calendar", "created_events")
        best = 0.0
        for event in created:
            hits = [event.get(k) == v for k, v in WANT.items()]
            hits.append("ravi@acme.example" in (event.get("attendees") or []))
            best = max(best, sum(hits) / len(hits))
        scores.completion = best if len(created) == 1 else best / max(len(created), 1)
        return scores
