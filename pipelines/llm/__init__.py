"""The optional anthropic provider: where the deterministic engine stops (prose instead of a command, tier-3
kernels, plain-language explanations), through the official `anthropic` SDK (`pip install liger-bot[llm]`).

Off unless the repo's `.github/liger-bot.yml` names it (`llm: {provider: anthropic}`) AND the App's environment
holds ANTHROPIC_API_KEY. What the model answers is text to judge, never to run: a proposed command is parsed by the
bot's command grammar and nothing else; a drafted kernel is a file the stage sandbox's gates verify.
"""
