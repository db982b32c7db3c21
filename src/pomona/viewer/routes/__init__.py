"""The viewer's JSON API, one router per domain: runs.py (runs, a run's tasks, the leaderboard)
and episodes.py (episodes, one episode's calls, raw rows and artifacts)."""
