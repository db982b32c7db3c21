"""Programs that run inside the episode's sandbox (uploaded there, run by the payload's CPython):
the mock services, the MCP server that forwards to them, and Claw-Eval's native loop. Each file
stands alone (stdlib, plus the `mcp` or `openai` SDK the payload carries): none imports Pomona."""
