from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class PhoneGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None,
              env_snapshot=None):
        scores = DimensionScores(robustness=self.compute_robustness(dispatches))
        updates = self.get_service_actions(audit_data, "contacts", "updated_contacts")
        right = [u for u in updates if u["id"] == "c1" and u.get("phone") == "+351 21 555 0199"]
        wrong = [u for u in updates if u["id"] != "c1"]
        scores.completion = 0.0 if wrong or not right else 1.0
        return scores
