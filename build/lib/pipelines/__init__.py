"""The domain of liger-bot: one folder per pipeline (understand -> act -> verify) and the pieces they share.

Nothing here knows about GitHub or webhooks; `bot/` calls in, never the other way round.
"""
