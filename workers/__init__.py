"""The learning worker: consumes the feedback stream and updates the state in Redis."""
