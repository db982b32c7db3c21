"""`pomona view`: a read-only web viewer over a trajectory store (runs, leaderboard, episodes)."""
