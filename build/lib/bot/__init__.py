"""The GitHub-facing side of liger-bot (webhook, commands, permissions, jobs, forges) and the CLI."""
