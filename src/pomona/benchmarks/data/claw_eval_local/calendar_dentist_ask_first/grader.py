from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class DentistGrader(AbstractGrader):
    """The assistant asks before booking, then books the slot the user named."""

    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None,
              env_snapshot=None):
        scores = DimensionScores(robustness=self.compute_robustness(dispatches))
        created = self.get_service_actions(audit_data, "calendar", "created_events")
        booked = [e for e in created if e.get("start") == "2026-12-09T10:00"]
        # ask_user is called directly, or through a deferred-tool gateway (OpenClaw's tool_call)
        asked = any(b.get("type") == "tool_use" and "ask_user" in (b.get("name", "") + str(b.get("input")))
                    or "?" in m.message.text
                    for m in messages if m.message.role == "assistant" for b in m.message.content)
        scores.completion = (0.5 if booked and len(created) == 1 else 0.0) + (0.5 if asked else 0.0)
        return scores
