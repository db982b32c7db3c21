"""Personal-assistant benchmarks: Claw-Eval (task.yaml) and QwenClawBench (task_*.md), their
mock services, graders, judges and scoring, run through real harnesses with the task's tools
given over MCP. See docs/claw.md."""
