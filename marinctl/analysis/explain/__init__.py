"""Why a step looks as it does: findings ranked, attributed, explained, in context."""
